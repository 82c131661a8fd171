"""The suite's own runner: a worker that dies mid-file (a segfault in a node's library, a stray
SIGKILL) costs the test it died in, not the session (test/conftest.py's scheduler)."""
import subprocess
import os
import sys

from rosutil import ROOT


def test_a_crashed_worker_fails_its_test_and_the_run_goes_on(tmp_path):
    (tmp_path / 'test_a.py').write_text('def test_1(): pass\ndef test_2(): pass\n')
    (tmp_path / 'test_b.py').write_text('import os\ndef test_dies(): os._exit(1)\ndef test_after(): pass\n')
    (tmp_path / 'test_c.py').write_text('def test_3(): pass\n')
    # One worker: xdist 3.8.0's own loadfile scheduling waits for ever here (it re-sends test_a.py,
    # finished, as an empty batch to the replacement worker).
    p = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-p', 'xdist_schedule', '-n', '1',
                        '--dist', 'loadfile', str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, 'PYTHONPATH': os.pathsep.join([str(ROOT / 'test'), os.environ.get('PYTHONPATH', '')])})
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "crashed while running 'test_b.py::test_dies'" in out, out
    assert '1 failed, 4 passed' in out, out  # test_after ran, test_dies did not run twice
