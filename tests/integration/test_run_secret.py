"""sbx run --secret NAME=@FILE|env:VAR: the value is readable at /run/secrets/NAME (0400, a
private tmpfs) during the run only, is never in the record, and a bad source is refused (125)
without echoing it."""
import os
import secrets

from sbxtest import SbxTestCase, ledger_lines, sbx


class RunSecret(SbxTestCase):
    def test_file_and_env_sources_are_delivered_and_not_recorded(self):
        value = "v-" + secrets.token_hex(16)
        src = self.path("key")
        with open(src, "w") as f:
            f.write(value)
        os.chmod(src, 0o600)
        env_value = "e-" + secrets.token_hex(16)
        r = self.run_sbx(["sh", "-c", "cat /run/secrets/API_KEY; echo; cat /run/secrets/TOKEN; echo; "
                                      "stat -c '%a' /run/secrets/API_KEY; echo \"env:${TOKEN:-unset}\""],
                         ["--secret", f"API_KEY=@{src}", "--secret", "TOKEN=env:SBX_TEST_TOKEN"],
                         env=dict(os.environ, SBX_TEST_TOKEN=env_value))
        self.assertExit(r, 0)
        self.assertEqual(r.out.split("\n")[:4], [value, env_value, "400", "env:unset"], r.describe())
        trace = self.need_trace(r)
        text = open(r.trace_path).read() if getattr(r, "trace_path", None) else str(trace)
        self.assertNotIn(value, text)
        self.assertNotIn(env_value, text)
        self.assertIn(f"API_KEY=@{src}", trace["invocation"]["argv"], "the record names the secret and its source")
        state = os.environ["SBX_STATE_DIR"]
        with open(os.path.join(state, "traces", "ledger.jsonl")) as f:
            ledger = f.read()
        self.assertNotIn(value, ledger)
        self.assertNotIn(env_value, ledger)
        self.assertTrue(ledger_lines(state))

    def test_bad_sources_and_names_are_125_without_the_value(self):
        for args, words in (([f"K=the-value-itself"], ["--secret K", "@FILE or env:VAR"]),
                            (["K=@/nonexistent/sbx-secret"], ["--secret K", "cannot read secret file"]),
                            (["K=env:SBX_SURELY_UNSET_VAR"], ["--secret K", "SBX_SURELY_UNSET_VAR"]),
                            (["9K=@/etc/hostname"], ["--secret"]),
                            (["a/b=@/etc/hostname"], ["--secret"]),
                            (["K=@/etc/hostname", "K=@/etc/hostname"], ["given twice"])):
            argv = ["run"]
            for a in args:
                argv += ["--secret", a]
            r = sbx(argv + ["--", "true"])
            self.assertExit(r, 125)
            line = self.assertOneSbxLine(r)
            for w in words:
                self.assertIn(w, line)
            self.assertNotIn("the-value-itself", line)
        r = sbx(["run", "--keep-inputs", "--secret", "K=@/etc/hostname", "--", "true"])
        self.assertExit(r, 125)
        self.assertIn("never kept", self.assertOneSbxLine(r))
