"""Where the SASS gate's tools and sources come from, and the one nvcc call: the disassembler
(cuobjdump, else nvdisasm, found by ``freetoken_overlay.toolchain``), the installed freetoken's
decode_gather header, include directories and default ring, upstream's CUDA flags, and
:func:`compile_cubin` (``.cu`` -> cubin plus the ``ptxas -v`` log)."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
from typing import Iterable, Sequence

from freetoken_overlay.toolchain import DISASSEMBLER_INSTALL_HINT, ToolNotFound, find_tool  # the tool finders' home
from freetoken_overlay.toolchain import package_dirs, require_nvcc, tool_version

DEFAULT_ARCHS = (80, 90, 100, 120)
# freetoken.kernel.utils.DEFAULT_CUDA_CFLAGS of 0.2.1; the installed package's own value wins
# (read from its source by upstream_cuda_cflags(), without importing torch and triton).
FALLBACK_CUDA_CFLAGS = ("-std=c++20", "-O3", "--expt-relaxed-constexpr")
# The kernel's JIT wrapper, as freetoken.kernel.utils._make_wrapper writes it (one per ring: launch_<c>_<s>_<k>).
DECODE_GATHER_EXPORT = "launch"


class CompileError(RuntimeError):
    """nvcc failed; the message holds its command line and output."""


_package_dirs = package_dirs  # the freetoken lookups below go through this name (tests replace it)


@dataclasses.dataclass(frozen=True)
class Disassembler:
    """cuobjdump (sass, elf, res-usage) or nvdisasm (sass with sections; no res-usage)."""

    kind: str  # "cuobjdump" | "nvdisasm"
    path: str
    #: where a listing is kept by its inputs (the tool's full ``--version``, the arguments, the cubin's bytes), as
    #: compile_cubin's ``cache`` keeps cubins: the same cubin is not disassembled again
    cache: pathlib.Path | None = None

    def _run(self, *args: str) -> str:
        *options, cubin = args
        entry = None
        if self.cache is not None:
            version = subprocess.run([self.path, "--version"], capture_output=True, timeout=60).stdout
            entry = self.cache / _digest(version, *(a.encode() for a in options), pathlib.Path(cubin).read_bytes())
            if (entry / "out").is_file():
                return (entry / "out").read_text(encoding="utf-8")
        proc = subprocess.run([self.path, *args], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"{self.kind} failed ({proc.returncode}): {' '.join([self.path, *args])}\n"
                               f"{proc.stdout}\n{proc.stderr}")  # fmt: skip
        if entry is not None:
            _store(entry, out=proc.stdout)
        return proc.stdout

    def sass(self, cubin: str | os.PathLike) -> str:
        return self._run(*(["-sass"] if self.kind == "cuobjdump" else []), str(cubin))

    def elf(self, cubin: str | os.PathLike) -> str:
        """Text holding the ELF's symbols and relocations (where syscall externs show)."""
        return self._run(*(["-elf"] if self.kind == "cuobjdump" else []), str(cubin))

    def res_usage(self, cubin: str | os.PathLike) -> str | None:
        if self.kind == "cuobjdump":
            return self._run("-res-usage", str(cubin))
        return None

    def version(self) -> str:
        return tool_version(self.path)


def find_disassembler() -> Disassembler | None:
    """cuobjdump if any is found, else nvdisasm, else None."""
    found = [(kind, path) for kind in ("cuobjdump", "nvdisasm") if (path := find_tool(kind))]
    return Disassembler(*found[0]) if found else None


def require_disassembler() -> Disassembler:
    found = find_disassembler()
    if found is None:
        raise ToolNotFound(DISASSEMBLER_INSTALL_HINT)
    return found


def freetoken_dir() -> pathlib.Path | None:
    """The installed ``freetoken`` package's directory, found without importing it."""
    dirs = _package_dirs("freetoken")
    return dirs[0] if dirs else None


def _in_freetoken(rel: str, why: str = "") -> pathlib.Path:
    """``<freetoken>/<rel>``; ``LookupError`` names what is missing."""
    root = freetoken_dir()
    if root is None:
        raise LookupError("the freetoken package is not installed (no importlib spec for 'freetoken')")
    if not (root / rel).exists():
        raise LookupError(f"freetoken at {root} has no {rel}{why}")
    return root / rel


def decode_gather_header() -> pathlib.Path:
    why = ": the patched freetoken (with the decode_gather kernel) is not the one installed"
    return _in_freetoken("kernel/csrc/jit/decode_gather.cuh", why)


def freetoken_include_dir() -> pathlib.Path:
    return _in_freetoken("kernel/csrc/include/freetoken").parent


def tvm_ffi_include_dirs() -> list[str]:
    """tvm-ffi's include paths (tvm_ffi.libinfo.include_paths()) plus its dlpack include."""
    try:
        from tvm_ffi import libinfo
    except ImportError as exc:
        raise LookupError(f"apache-tvm-ffi is not importable ({exc}): pip install apache-tvm-ffi") from exc
    dirs = list(libinfo.include_paths())
    try:
        dlpack = libinfo.find_dlpack_include_path()
    except (AttributeError, RuntimeError):
        dlpack = None
    if dlpack and dlpack not in dirs:
        dirs.append(dlpack)
    if not any((pathlib.Path(d) / "tvm" / "ffi").is_dir() for d in dirs):
        raise LookupError(f"tvm_ffi.libinfo.include_paths()={dirs} holds no tvm/ffi headers")
    if not any((pathlib.Path(d) / "dlpack" / "dlpack.h").is_file() for d in dirs):
        raise LookupError(f"no dlpack/dlpack.h under tvm-ffi's include paths {dirs}")
    return dirs


def decode_gather_include_dirs() -> list[str]:
    return [str(freetoken_include_dir()), *tvm_ffi_include_dirs()]


def _decode_gather():
    """``freetoken.kernel.decode_gather`` (imports freetoken, hence torch); ``LookupError`` where it cannot."""
    try:
        from freetoken.kernel import decode_gather
    except ImportError as exc:
        raise LookupError(f"freetoken.kernel.decode_gather is not importable ({exc})") from exc
    return decode_gather


def decode_gather_default_ring() -> tuple[int, int, int]:
    """``freetoken.kernel.decode_gather.default_ring()``."""
    ring = tuple(int(v) for v in _decode_gather().default_ring())
    if len(ring) != 3:
        raise LookupError(f"default_ring() returned {ring!r}, expected (ctas, stages, chunk_bytes)")
    return ring  # type: ignore[return-value]


def decode_gather_prebuilt_rings() -> tuple[tuple[int, int, int], ...]:
    """The rings freetoken's kernel cache builds into one module (``PREBUILT_RINGS``; a series without
    that set prebuilds only ``default_ring()``)."""
    rings = getattr(_decode_gather(), "PREBUILT_RINGS", None) or (decode_gather_default_ring(),)
    return tuple(tuple(int(v) for v in ring) for ring in rings)  # type: ignore[misc]


def decode_gather_source(rings: Sequence[int] | Sequence[Sequence[int]], header: pathlib.Path | None = None) -> str:
    """The translation unit upstream's JIT builds for one ring, or for several in one module
    (load_jit's cuda_sources: one exported launcher per ring)."""
    header = header or decode_gather_header()
    many = [tuple(rings)] if isinstance(rings[0], int) else [tuple(r) for r in rings]
    lines = [f'#include "{header.resolve()}"']
    for ring in many:
        args = ", ".join(str(int(v)) for v in ring)
        name = DECODE_GATHER_EXPORT if len(many) == 1 else f"{DECODE_GATHER_EXPORT}_{'_'.join(map(str, ring))}"
        lines.append(f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({name}, (&DecodeGatherKernel<{args}>::run));")
    return "\n".join(lines) + "\n"


def upstream_cuda_cflags() -> tuple[tuple[str, ...], str]:
    """(flags, where from): the installed freetoken's DEFAULT_CUDA_CFLAGS, else the 0.2.1 value."""
    root = freetoken_dir()
    utils = root / "kernel" / "utils.py" if root else None
    if utils and utils.is_file():
        with contextlib.suppress(SyntaxError, ValueError):
            for node in ast.parse(utils.read_text()).body:
                names = [getattr(t, "id", None) for t in getattr(node, "targets", ())]  # an Assign's
                if "DEFAULT_CUDA_CFLAGS" in names:
                    return tuple(str(v) for v in ast.literal_eval(node.value)), str(utils)
    return FALLBACK_CUDA_CFLAGS, "conformance.sass.build.FALLBACK_CUDA_CFLAGS"


@dataclasses.dataclass
class CompileResult:
    cubin: pathlib.Path
    ptxas_log: str
    command: list[str]
    cached: bool = False  # taken from ``cache`` (compile_cubin): nvcc compiled these exact inputs before


#: What nvcc reads from the environment besides its arguments (it appends or prepends these to every command).
NVCC_ENV = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")
_LINE_MARKER = re.compile(rb"^#(?:line)? \d+ .*\n", re.MULTILINE)


def _cache_key(nvcc: str, options: Sequence[str], source: pathlib.Path) -> str:
    """sha256 of every input of the cubin: nvcc's full ``--version``, the ``options`` (all but the fixed ones, the source
    and the output), :data:`NVCC_ENV`, and the translation unit as nvcc's preprocessor gives it for the device (every
    header's text and every macro in it; the ``# line`` markers, which name the paths, left out)."""
    version = subprocess.run([nvcc, "--version"], capture_output=True, timeout=60).stdout
    pre = subprocess.run([nvcc, *options, "-E", str(source)], capture_output=True, timeout=900)
    if pre.returncode != 0:
        raise CompileError(f"nvcc -E failed ({pre.returncode}) for {source}:\n{pre.stderr.decode()}")
    env = (os.environ.get(k, "").encode() for k in NVCC_ENV)
    return _digest(version, *(a.encode() for a in options), *env, _LINE_MARKER.sub(b"", pre.stdout))


def _digest(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part).digest())  # each part its own: no two splits of the bytes collide
    return digest.hexdigest()


def _store(entry: pathlib.Path, **files: bytes | str) -> None:
    """Put ``files`` (name: content) into the cache as ``entry``: written aside, then renamed (of two runs on the same
    inputs at once, one stores it)."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    aside = pathlib.Path(tempfile.mkdtemp(dir=entry.parent, prefix=".aside-"))
    for name, content in files.items():
        (aside / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    try:
        os.rename(aside, entry)
    except OSError:  # the other one stored it first
        shutil.rmtree(aside)


def compile_cubin(source: str | os.PathLike, arch: int, out_dir: str | os.PathLike, *, include_dirs: Iterable[str] = (),
                  flags: Sequence[str] | None = None, extra_flags: Sequence[str] = (), nvcc: str | None = None,
                  cache: str | os.PathLike | None = None) -> CompileResult:  # fmt: skip
    """``nvcc <flags> -I... -cubin -arch=sm_<arch> -Xptxas -v <source>``; the log is ptxas's.  With ``cache`` (a
    directory), the cubin and log nvcc made before from the same inputs (:func:`_cache_key`) are taken from there,
    and a new one is stored there."""
    nvcc, source, out_dir = nvcc or require_nvcc(), pathlib.Path(source), pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cubin = out_dir / f"{source.stem}.sm_{arch}.cubin"
    flags = upstream_cuda_cflags()[0] if flags is None else flags
    options = [*flags, *extra_flags, *(f"-I{d}" for d in include_dirs)]
    cmd = [nvcc, *options, "-cubin", f"-arch=sm_{arch}", "-Xptxas", "-v", str(source), "-o", str(cubin)]
    entry = pathlib.Path(cache) / _cache_key(nvcc, [*options, f"-arch=sm_{arch}"], source) if cache else None
    if entry is not None and (entry / "cubin").is_file():
        shutil.copyfile(entry / "cubin", cubin)
        return CompileResult(cubin=cubin, ptxas_log=(entry / "log").read_text(encoding="utf-8"), command=cmd, cached=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0 or not cubin.is_file():
        raise CompileError(f"nvcc failed ({proc.returncode}) for sm_{arch}:\n{' '.join(cmd)}\n{log}")
    if entry is not None:
        _store(entry, cubin=cubin.read_bytes(), log=log)
    return CompileResult(cubin=cubin, ptxas_log=log, command=cmd)
