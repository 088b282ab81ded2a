"""Keep each worker's numeric libraries to a few threads, so W workers do not run W x cores.

Envs that use numpy (OpenBLAS, MKL), OpenMP or torch inside a worker start, by default, one
thread per core in every library, in every worker: with W workers that is W x cores threads
fighting for the cores, and small matrix products get slower, not faster. A worker calls
:func:`limit_threads` first thing, before it builds (or unpickles) its envs:

* it sets ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``, ... to ``n`` in its
  own environment, so libraries loaded afterwards (the env's module, torch) start with ``n``
  threads; variables the user already set are left as they are;
* it limits the libraries already loaded, through their own APIs, because they read those
  variables only once, when they are loaded: under ``fork`` the worker inherits the parent's
  initialised OpenBLAS, and under ``spawn`` numpy is imported before any worker code runs. A
  library whose variables the user set is left alone here too.

The runtime part uses ``threadpoolctl`` when it is installed (it knows every BLAS and OpenMP
build, prefixed and 64-bit-integer variants included, on every platform); otherwise a minimal
fallback finds OpenBLAS, MKL, BLIS and OpenMP runtimes among the shared objects mapped in this
process (``/proc/self/maps``, Linux) and calls their ``set_num_threads`` functions.

Never call this in the parent: it changes the calling process's environment and libraries.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from collections.abc import Iterator

__all__ = ["THREAD_ENV_VARS", "limit_threads"]

#: Variables set to ``n`` unless already set. OpenMP and the BLAS builds read them at load time.
THREAD_ENV_VARS: tuple[str, ...] = (
    "OMP_NUM_THREADS",  # OpenMP runtimes (libgomp, libomp, libiomp); torch; many others
    "OPENBLAS_NUM_THREADS",  # OpenBLAS (numpy's and scipy's wheels)
    "MKL_NUM_THREADS",  # Intel MKL
    "VECLIB_MAXIMUM_THREADS",  # Apple Accelerate
    "NUMEXPR_NUM_THREADS",  # numexpr (pandas)
    "BLIS_NUM_THREADS",  # BLIS
    "GOTO_NUM_THREADS",  # GotoBLAS, read by OpenBLAS too
)

# Which variables configure which runtime library (a library is left alone at runtime when the
# user set one of them). Keys are threadpoolctl's internal_api names.
_LIBRARY_VARS: dict[str, tuple[str, ...]] = {
    "openblas": ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"),
    "mkl": ("MKL_NUM_THREADS", "OMP_NUM_THREADS"),
    "blis": ("BLIS_NUM_THREADS", "OMP_NUM_THREADS"),
    "flexiblas": ("FLEXIBLAS_NUM_THREADS", "OMP_NUM_THREADS"),
    "openmp": ("OMP_NUM_THREADS",),
}


def limit_threads(n: int | None) -> None:
    """Limit this process's BLAS/OpenMP (and already imported torch) to ``n`` threads each.

    ``n=None`` leaves everything alone. Settings the user made win: a variable already in the
    environment is not overwritten, and the libraries it configures are not limited at runtime.
    Failures of the runtime part (an unusual library build) are ignored: the variables are set
    whatever happens, and a worker must never fail to start because of a thread limit.

    Raises:
        TypeError, ValueError: ``n`` is not None or a positive int.
    """
    if n is None:
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        # Imported only to refuse: this module imports nothing else of vecenv (see the module doc).
        from vecenv.errors import ArgumentTypeError, InvalidArgumentError

        if isinstance(n, bool) or not isinstance(n, int):
            raise ArgumentTypeError(
                f"`n` (threads per worker) must be a positive int or None, got {type(n).__name__} {n!r}"
            )
        raise InvalidArgumentError(f"`n` (threads per worker) must be a positive int or None, got {n}")
    user_set = {name for name in _all_vars() if os.environ.get(name, "").strip()}
    for name in THREAD_ENV_VARS:
        if name not in user_set:
            os.environ[name] = str(n)
    libraries = [lib for lib, names in _LIBRARY_VARS.items() if not user_set.intersection(names)]
    if not libraries:
        return
    try:
        _limit_loaded(n, libraries)
    except Exception:  # noqa: BLE001 - best effort: never keep a worker from starting
        pass
    torch = sys.modules.get("torch")
    if torch is not None and "openmp" in libraries:  # torch's intra-op pool follows OMP_NUM_THREADS
        try:
            torch.set_num_threads(n)
        except Exception:  # noqa: BLE001
            pass


def _all_vars() -> set[str]:
    names = set(THREAD_ENV_VARS)
    for group in _LIBRARY_VARS.values():
        names.update(group)
    return names


def _limit_loaded(n: int, libraries: list[str]) -> None:
    """Set the thread count of the already loaded ``libraries`` (threadpoolctl names)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        _fallback_limit(n, libraries)
        return
    # Used outside a ``with``: the limits stay in force for the life of the worker.
    ThreadpoolController().select(internal_api=libraries).limit(limits=n)


# -- the fallback without threadpoolctl (Linux) -------------------------------------------------

# (library, file-name pattern of the shared object, setter symbols to try in order)
_OPENBLAS_SETTERS = tuple(
    f"{prefix}openblas_set_num_threads{suffix}" for prefix in ("", "scipy_") for suffix in ("", "64_", "_64")
)
_FALLBACK_LIBRARIES: tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...] = (
    ("openblas", re.compile(r"lib\w*openblas[^/]*\.so"), _OPENBLAS_SETTERS),
    ("mkl", re.compile(r"libmkl_rt[^/]*\.so"), ("MKL_Set_Num_Threads",)),
    ("blis", re.compile(r"libblis[^/]*\.so"), ("bli_thread_set_num_threads",)),
    ("openmp", re.compile(r"lib(?:g|i5|i)?omp[^/]*\.so"), ("omp_set_num_threads",)),
)


def _mapped_shared_objects() -> Iterator[str]:
    """Paths of the shared objects mapped in this process, each once."""
    seen: set[str] = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)  # address perms offset dev inode [path]
                path = parts[5].strip() if len(parts) == 6 else ""
                if ".so" in path and path.startswith("/") and path not in seen:
                    seen.add(path)
                    yield path
    except OSError:
        return


def _fallback_limit(n: int, libraries: list[str]) -> None:
    """Call each loaded library's own setter; libraries not loaded are not loaded here."""
    for path in _mapped_shared_objects():
        name = os.path.basename(path)
        for lib, pattern, setters in _FALLBACK_LIBRARIES:
            if lib not in libraries or not pattern.search(name):
                continue
            try:
                handle = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            except OSError:
                continue
            for symbol in setters:
                setter = getattr(handle, symbol, None)
                if setter is not None:
                    setter(ctypes.c_int(n))
                    break
