"""The pip build of the spattn package: the project's CMake builds the extension (spattn._core)
and the command line (spattn/_bin/spattn, what `python -m spattn` runs) in Release, and both are
copied into the package beside its .py files.

Run from a checkout: the C++ sources are one level up (an sdist alone cannot build).
Environment:
  CMAKE_ARGS                  extra CMake arguments, last (so they win), e.g. "-DSPATTN_CUDA=off"
  SPATTN_CUDA                 auto (default), on or off: the CUDA backend, as -DSPATTN_CUDA
  SPATTN_PIP_BUILD_DIR        the CMake build folder (default: build-pip at the checkout's root,
                              the depth of build/, so ccache serves objects `make build` compiled)
  CMAKE_BUILD_PARALLEL_LEVEL  compile jobs (default: every core)
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# What the package needs of the CMake project: the extension, and the command line linked into
# the package's folder (python/CMakeLists.txt).
TARGETS = ["spattn_python", "spattn_python_cli"]


def project_version():
    """The C++ project's version, the one place it is written: project(spattn VERSION x.y.z)."""
    cmake = ROOT / "CMakeLists.txt"
    if not cmake.exists():
        sys.exit(f"spattn: {cmake} not found: the package builds from a spattn checkout "
                 f"(pip install ./python at its root)")
    m = re.search(r"project\(\s*spattn\s+VERSION\s+([0-9][0-9.]*)", cmake.read_text())
    if not m:
        sys.exit(f"spattn: no project(spattn VERSION ...) in {cmake}")
    return m.group(1)


def cmake_args():
    args = ["-DCMAKE_BUILD_TYPE=Release", f"-DPython3_EXECUTABLE={sys.executable}",
            "-DSPATTN_BUILD_TESTS=OFF", "-DSPATTN_BUILD_BENCH=OFF"]
    try:  # pip's pybind11 where the environment has one (no pybind11-dev); else Debian's
        import pybind11
        args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
    except ImportError:
        pass
    if os.environ.get("SPATTN_CUDA"):
        args.append(f"-DSPATTN_CUDA={os.environ['SPATTN_CUDA']}")
    return args + shlex.split(os.environ.get("CMAKE_ARGS", ""))


def run(cmd):
    print("spattn:", " ".join(shlex.quote(str(c)) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True)


class CMakeBuild(build_ext):
    """Builds TARGETS with CMake (incrementally: a second build reuses the folder) and copies
    the artifacts CMake laid out in <build>/python/spattn/ into the package."""

    def build_extension(self, ext):
        build = Path(os.environ.get("SPATTN_PIP_BUILD_DIR") or ROOT / "build-pip").resolve()
        run(["cmake", "-S", ROOT, "-B", build, *cmake_args()])
        jobs = [] if os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") else ["-j", os.cpu_count() or 1]
        run(["cmake", "--build", build, "--target", *TARGETS, *jobs])

        built = build / "python" / "spattn"
        module = built / ("_core" + sysconfig.get_config_var("EXT_SUFFIX"))
        cli = built / "_bin" / "spattn"
        for f in (module, cli):
            if not f.exists():
                sys.exit(f"spattn: CMake built no {f} (python/CMakeLists.txt lays it out)")
        dest = Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(module, dest)
        (dest.parent / "_bin").mkdir(exist_ok=True)
        shutil.copy2(cli.resolve(), dest.parent / "_bin" / "spattn")  # the file, with its mode


setup(
    version=project_version(),
    packages=["spattn"],
    ext_modules=[Extension("spattn._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
