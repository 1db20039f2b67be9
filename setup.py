"""The optional C extensions: the native ONNX importer (estimator/native_import.pyx) and the
Monte Carlo kernel of the network sums (estimator/native_mc.pyx).

Everything else is declared in pyproject.toml. ``pip install`` (editable or not) compiles
the extensions with Cython and the C compiler; ``python setup.py build_ext --inplace``
rebuilds them beside the sources. Where there is no working C compiler (or no Cython, in a
``--no-build-isolation`` install), the install still succeeds with one line in its log
(shown by ``pip install -v``) and the Python code runs, which is the truth the extensions
are held to (tests/test_native_import.py, tests/test_fastpath.py).
"""
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NOTE = "confident-latency: no C compiler, the native extensions (ONNX importer, Monte Carlo sums) are not built; pure Python is used"


class OptionalBuildExt(build_ext):
    """build_ext that reports a missing or failing compiler in one line instead of failing."""

    _noted = False

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - e.g. no compiler found at all (PlatformError)
            self._fallback(e)

    def build_extensions(self) -> None:
        self._failed: set[str] = set()
        super().build_extensions()
        # what failed is not copied beside the sources nor listed as an output
        self.extensions = [e for e in self.extensions if e.name not in self._failed]

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001 - CompileError, LinkError, a compiler that is not there
            self._failed.add(ext.name)
            self._fallback(e)

    def _fallback(self, e: Exception) -> None:
        if not self._noted:
            self._noted = True
            reason = " ".join(str(e).split())
            reason = reason if len(reason) <= 160 else reason[:157] + "..."
            print(f"{NOTE} ({type(e).__name__}: {reason})", flush=True)


def _extensions() -> list[Extension]:
    exts = [Extension("estimator.native_import", ["estimator/native_import.pyx"]),
            Extension("estimator.native_mc", ["estimator/native_mc.pyx"])]
    try:
        from Cython.Build import cythonize
    except ImportError:  # (only without build isolation: pyproject.toml requires Cython)
        print("confident-latency: no Cython, the native extensions (ONNX importer, Monte Carlo sums) are not built; "
              "pure Python is used", flush=True)
        return []
    return cythonize(exts, compiler_directives={"language_level": 3}, quiet=True)


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
