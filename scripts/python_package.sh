#!/usr/bin/env bash
# The Python package as users install it (issue 65), run by ctest (test python_package):
#  1. a fresh venv (--system-site-packages: Debian's numpy, pytest, matplotlib), `pip install
#     ./python` from this checkout, and the package's pytest against the installed package;
#  2. `pip wheel ./python`, the wheel installed into a second fresh venv, the tests again.
# Offline: no package index, no build isolation (setuptools and wheel come from the system).
# The pip build's CMake folder (SPATTN_PIP_BUILD_DIR, setup.py) compiles through ccache, so
# after `make build` it costs configure and links; the second build reuses the first's folder.
#
#   scripts/python_package.sh [WORK_DIR]          (default: build/python-package)
# Environment: PYTHON (the base interpreter, default /usr/bin/python3), SPATTN_RUN_METHOD (the
# bitwise test's program; that test skips without it), SPATTN_PIP_BUILD_DIR.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(realpath -m "${1:-$root/build/python-package}")"
py="${PYTHON:-/usr/bin/python3}"
pip_flags=(--no-index --no-build-isolation --no-cache-dir --disable-pip-version-check)
rm -rf "$work"
mkdir -p "$work"

# The package's tests from a folder outside the checkout, so `import spattn` finds the venv's
# package, never python/spattn (test_package.py checks where it came from).
check() {
  local venv=$1 site
  site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")
  # A wheel for another machine: nothing in it may point back into this checkout.
  if readelf -d "$site"/spattn/_core.*.so "$site/spattn/_bin/spattn" | grep -E "R(UN)?PATH" |
       grep -F "$root"; then
    echo "python_package.sh: a RUNPATH names the checkout" >&2
    exit 1
  fi
  (cd "$work" && env SPATTN_EXPECT_INSTALLED="$site" MPLBACKEND=Agg PYTHONDONTWRITEBYTECODE=1 \
     OMP_WAIT_POLICY=passive "$venv/bin/python" -m pytest -q -p no:cacheprovider \
     "$root/python/tests")
}

echo "== pip install ./python into a fresh venv"
"$py" -m venv --system-site-packages "$work/venv-install"
(cd "$root" && "$work/venv-install/bin/python" -m pip install -q "${pip_flags[@]}" ./python)
check "$work/venv-install"

echo "== pip wheel ./python, installed into a second fresh venv"
(cd "$root" && "$work/venv-install/bin/python" -m pip wheel -q "${pip_flags[@]}" --no-deps \
   -w "$work/wheels" ./python)
wheel=$(ls "$work"/wheels/spattn-*.whl)
echo "built $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"
"$py" -m venv --system-site-packages "$work/venv-wheel"
"$work/venv-wheel/bin/python" -m pip install -q "${pip_flags[@]}" "$wheel"
check "$work/venv-wheel"
