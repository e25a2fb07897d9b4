"""The package as installed: its version is the C++ project's, `python -m spattn` runs the
command line's verbs, and (where the pip check sets SPATTN_EXPECT_INSTALLED) the tests import
the installed package, not the build folder."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import spattn
from spattn._cli import executable

ROOT = Path(__file__).resolve().parents[2]


def test_version_is_the_cmake_projects():
    text = (ROOT / "CMakeLists.txt").read_text()
    want = re.search(r"project\(\s*spattn\s+VERSION\s+([0-9.]+)", text).group(1)
    assert spattn.__version__ == want
    try:
        from importlib.metadata import PackageNotFoundError, version
        assert version("spattn") == want
    except PackageNotFoundError:
        pass  # imported from a build folder, not installed


def test_imported_from_where_expected():
    where = os.environ.get("SPATTN_EXPECT_INSTALLED")
    if not where:
        pytest.skip("SPATTN_EXPECT_INSTALLED not set (the pip check sets it)")
    package = Path(spattn.__file__).resolve().parent
    assert package.is_relative_to(Path(where).resolve()), package
    assert (package / "_bin" / "spattn").is_file()  # the file, not a link into a build folder
    assert not (package / "_bin" / "spattn").is_symlink()


def python_m(*args, timeout=300):
    exe = executable()
    if not exe.exists():
        pytest.skip(f"no command line in the package ({exe}): build spattn_python_cli")
    return subprocess.run([sys.executable, "-m", "spattn", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_python_m_spattn_runs_the_command_line():
    r = python_m("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == spattn.__version__
    r = python_m("bench", "--workload", "text", "--seq", "256", "--heads", "2", "--dim", "64",
                 "--repeat", "1", "--method", "a_shape", "--json")
    assert r.returncode == 0, r.stderr
    records = json.loads(r.stdout)
    assert [x["method"] for x in records["results"]] == ["dense", "a_shape"]
    # Bad input: the command line's message and exit code, passed through.
    r = python_m("bench", "--method", "no_such_method", "--seq", "256")
    assert r.returncode == 2 and "no_such_method" in r.stderr
