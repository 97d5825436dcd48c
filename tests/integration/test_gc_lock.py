"""`sbx gc` takes the blob store's lock (<state>/blobs/lock, flock): exclusively while it reads the
ledger and deletes, so that a run keeping a blob (put_blob holds the lock shared) or another gc
cannot interleave with it. Runs as root and rootless.

On the previous binary gc takes no lock: it deletes at once while another process holds the
store's lock, and the test's "still waiting" check fails."""
import fcntl
import hashlib
import os
import subprocess
import time
import unittest

from sbxtest import SBX, SbxTestCase, note


class GcLock(SbxTestCase):
    def test_gc_waits_for_the_store_lock_then_deletes(self):
        state = self.path("state")
        env = dict(os.environ, SBX_STATE_DIR=state)
        # What a put or another gc holds: shared (a run keeping a blob) and exclusive (a gc).
        for mode, holder in ((fcntl.LOCK_SH, "a run keeping blobs"), (fcntl.LOCK_EX, "another gc")):
            with self.subTest(holder=holder):
                orphan_bytes = holder.encode()
                orphan = hashlib.sha256(orphan_bytes).hexdigest()
                path = os.path.join(state, "blobs", "sha256", orphan[:2], orphan)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(orphan_bytes)
                old = time.time() - 7200
                os.utime(path, (old, old))
                lock = os.open(os.path.join(state, "blobs", "lock"), os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(lock, mode)
                    gc = subprocess.Popen([SBX, "gc"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    time.sleep(1.5)
                    waiting = gc.poll() is None
                    note(f"{holder} holds the lock: gc still waiting after 1.5 s: {waiting}; orphan present: {os.path.exists(path)}")
                    self.assertTrue(waiting, "sbx gc did not wait for the blob store's lock")
                    self.assertTrue(os.path.exists(path), "sbx gc deleted a blob while the store was locked")
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
                    os.close(lock)
                out, err = gc.communicate(timeout=60)
                note(f"sbx gc after the lock was released: rc {gc.returncode}\n{out}{err}")
                self.assertEqual(gc.returncode, 0, err)
                self.assertIn(f"deleted sha256:{orphan} ({len(orphan_bytes)}): named by no record", out)
                self.assertFalse(os.path.exists(path))


if __name__ == "__main__":
    unittest.main()
