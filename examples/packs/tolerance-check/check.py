"""tolerance-check: measured depths (/in/records.json, validated by sbx) against the drawing's
tolerances (/context/tolerances.json, mounted read-only). The result goes to /out/result.json and
is validated by sbx against schemas/output.json before anyone sees it.

margin_mm is the distance to the nearer tolerance limit: positive inside the band, negative
outside (by how much the feature misses)."""
import json

with open("/in/records.json") as f:
    records = json.load(f)
with open("/context/tolerances.json") as f:
    drawing = json.load(f)

out = []
for r in records:
    tol = drawing["features"].get(r["feature"])
    d = r["measured_depth_mm"]
    if tol is None:
        out.append({"feature": r["feature"], "measured_depth_mm": d, "result": "no_tolerance"})
        continue
    lower = tol["nominal_mm"] - tol["minus_mm"]
    upper = tol["nominal_mm"] + tol["plus_mm"]
    margin = round(min(d - lower, upper - d), 4)
    out.append({"feature": r["feature"], "measured_depth_mm": d, "nominal_mm": tol["nominal_mm"],
                "lower_mm": round(lower, 4), "upper_mm": round(upper, 4), "margin_mm": margin,
                "result": "pass" if margin >= 0 else "fail"})

with open("/out/result.json", "w") as f:
    json.dump({"drawing": drawing.get("drawing", ""), "features": out}, f)
