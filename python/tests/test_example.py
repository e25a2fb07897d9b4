"""The example script runs as docs/python.md shows it (on a small workload here, every method at
its default spec), prints the table and writes its picture and records."""
import json
import os
import subprocess
import sys


def test_compare_methods_example_runs(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = os.path.join(root, "examples", "compare_methods.py")
    out, records = tmp_path / "cmp.png", tmp_path / "cmp.json"
    r = subprocess.run([sys.executable, script, "--seq", "1024", "--heads", "2", "--dim", "64",
                        "--repeat", "1", "--out", str(out), "--json", str(records)],
                       capture_output=True, text=True, env=dict(os.environ), timeout=600)
    assert r.returncode == 0, r.stderr
    assert "dense" in r.stdout and "wrote" in r.stdout
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    runs = json.load(open(records))["results"]
    assert runs[0]["method"] == "dense" and len(runs) > 5
