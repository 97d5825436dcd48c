"""Nothing from a user or a sandbox reaches a terminal raw: `trace ls`, `trace show` (text and json),
errors and warnings escape control characters, C1 controls and direction overrides of outside origin
(argv, a pack's manifest, paths)."""
import json
import os
import re

from sbxtest import SbxTestCase, sbx

# ESC sequences (window title, colour, clear screen), BEL, CR and LF that would forge a row of a
# listing, DEL, a C1 CSI (U+009B) and a right-to-left override (U+202E).
EVIL = "\x1b]0;pwned\x07\x1b[31mRED\x1b[2J\r\nFAKE-ROW 20990101 ok\x7f\u009b31m\u202eexe.txt"

# Bytes a terminal acts on: C0 controls other than the newline ending a line, DEL, UTF-8 encoded
# C1 controls, and the bidirectional/invisible format characters.
RAW = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\x8b-\x8f\xa8-\xae]|\xe2\x81[\xa0-\xa9]|\xef\xbb\xbf")


class TerminalEscape(SbxTestCase):
    def setUp(self):
        super().setUp()
        self.state = self.path("state")
        os.makedirs(self.state)
        self.env = dict(os.environ, SBX_STATE_DIR=self.state)

    def assertNoRaw(self, data, what):
        m = RAW.search(data)
        self.assertIsNone(m, f"{what} printed a raw control byte {m and m.group()!r}: {data[:3000]!r}")

    def test_listing_and_record_of_a_hostile_argv_are_escaped(self):
        r = sbx(["run", "--", "/bin/echo", EVIL], env=self.env)
        self.assertEqual(r.rc, 0, r.describe())
        ls = sbx(["trace", "ls"], env=self.env)
        self.assertEqual(ls.rc, 0, ls.describe())
        self.assertNoRaw(ls.stdout, "trace ls")
        lines = ls.stdout.decode().splitlines()
        self.assertEqual(len(lines), 2, f"one header and one row, no forged rows: {lines}")
        self.assertIn("FAKE-ROW", lines[1], "the whole argv stays on its own row")
        run_id = lines[1].split()[0]

        text = sbx(["trace", "show", run_id, "--format", "text"], env=self.env)
        self.assertEqual(text.rc, 0, text.describe())
        self.assertNoRaw(text.stdout, "trace show --format text")
        cmd = [l for l in text.stdout.decode().splitlines() if l.startswith("command")]
        self.assertEqual(len(cmd), 1)
        self.assertIn("FAKE-ROW", cmd[0], "the argument stays on the command line of the summary")
        self.assertIn("\\x1b", cmd[0], "ESC is shown as an escape")

        js = sbx(["trace", "show", run_id], env=self.env)
        self.assertEqual(js.rc, 0, js.describe())
        self.assertNoRaw(js.stdout, "trace show (json)")
        self.assertEqual(json.loads(js.stdout)["invocation"]["spec"]["argv"][-1], EVIL, "the JSON form is lossless")

    def test_errors_escape_paths(self):
        r = sbx(["run", "--bind", "/nonexistent" + EVIL + ":/x", "--", "/bin/true"], env=self.env)
        self.assertEqual(r.rc, 125, r.describe())
        self.assertNoRaw(r.stderr, "the error about a bind source")
        self.assertEqual(len(r.stderr.splitlines()), 1, r.describe())
        r = sbx(["run", "--", "/nonexistent" + EVIL], env=self.env)
        self.assertEqual(r.rc, 127, r.describe())
        self.assertNoRaw(r.stderr, "the error about a missing command")

    def test_pack_manifest_strings_are_escaped(self):
        d = self.path("pack")
        os.makedirs(d + "/schemas")
        for p in (d, d + "/schemas"):
            os.chmod(p, 0o755)
        schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}
        manifest = {"name": "evil", "version": "1.0" + EVIL, "entrypoint": ["/bin/sh", "/pack/run.sh", EVIL],
                    "input_schema": "schemas/in.json", "output_schema": "schemas/out.json"}
        files = {"pack.json": json.dumps(manifest), "schemas/in.json": json.dumps(schema),
                 "schemas/out.json": json.dumps(schema), "run.sh": "echo '{}' > /out/result.json\n",
                 "records.json": "[{}]"}
        for rel, content in files.items():
            with open(os.path.join(d, rel), "w") as f:
                f.write(content)
            os.chmod(os.path.join(d, rel), 0o644)
        v = sbx(["pack", "validate", d], env=self.env)
        self.assertNoRaw(v.stdout + v.stderr, "pack validate")
        r = sbx(["pack", "run", d, "--input", d + "/records.json"], env=self.env)
        self.assertNoRaw(r.stderr, "pack run's stderr")
        ls = sbx(["trace", "ls"], env=self.env)
        self.assertNoRaw(ls.stdout, "trace ls of a pack run")
        rows = ls.stdout.decode().splitlines()[1:]
        if rows:
            text = sbx(["trace", "show", rows[0].split()[0], "--format", "text"], env=self.env)
            self.assertNoRaw(text.stdout, "trace show --format text of a pack run")
