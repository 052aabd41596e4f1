"""The decode_gather kernel's machine code, per target arch (no GPU needed).

For sm_80, sm_90, sm_100 and sm_120, the kernel as upstream's JIT builds it (the installed
freetoken's decode_gather.cuh, every ring the kernel cache prebuilds, DEFAULT_CUDA_CFLAGS) must:

* use the bulk-copy engine natively on sm_90+ (UBLKCP.S.G host->smem and UBLKCP.G.S
  smem->slot) and are a trap stub on sm_80 (no bulk-copy engine; the host refuses such devices);
* call nothing: no CALL.ABS.NOINC (a driver routine whose first launch raises the context's
  per-thread stack limit for good) and no other CALL, no __cuda_syscall extern;
* have a 0-byte stack frame, no LDL/STL and no spills.

Both index instantiations (int32 and int64) of every ring are in the same cubin; every function is checked.
The negative controls in controls/ show that each check can fail: the `.shared::cluster`
bulk-copy form on sm_120 (CALL.ABS.NOINC), a runtime-indexed local array (LDL/STL, stack
frame), and a register-starved kernel (spills), all through the same scanner.
"""

from __future__ import annotations

import concurrent.futures
import pathlib

import pytest

from conformance.sass import build as sass_build
from conformance.sass.build import CompileError, Disassembler, decode_gather_header, decode_gather_source, find_disassembler, require_disassembler
from conformance.sass.contract import DECODE_GATHER_INSTANTIATIONS, decode_gather_violations, expects_ublkcp, is_decode_gather
from conformance.sass.parse import parse_ptxas, parse_sass
from conformance.sass.report import FunctionReport, SassReport, format_table, scan, scan_cubin
from freetoken_overlay import toolchain

ARCHS = (80, 90, 100, 120)
CONTROLS = pathlib.Path(__file__).parent / "controls"
JOBS = 2  # CI has 2 cores
# one xdist worker builds the session's cubins (nox -s test: --dist loadgroup), not each worker its own
pytestmark = pytest.mark.xdist_group("sass")


def _scan_all(jobs: list[tuple], common: dict) -> dict:
    """Run ``scan(source, arch, out_dir, **kw)`` for each job, JOBS at a time; keep errors."""
    results: dict = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=JOBS) as pool:
        futures = {
            key: pool.submit(scan, source, arch, out_dir, **common, **kw)
            for key, source, arch, out_dir, kw in jobs
        }
        for key, fut in futures.items():
            try:
                results[key] = fut.result()
            except (CompileError, RuntimeError) as exc:  # the test that needs it fails with this
                results[key] = exc
    return results


def _get(results: dict, key):
    value = results[key]
    if isinstance(value, BaseException):
        pytest.fail(f"building/scanning {key} failed:\n{value}", pytrace=False)
    return value


@pytest.fixture(scope="session")
def decode_gather_reports(
    tmp_path_factory, nvcc, disassembler, decode_gather_header, decode_gather_include_dirs, decode_gather_rings,
    cuda_cflags, sass_cache,
) -> dict:
    """arch -> SassReport of the decode_gather module of the prebuilt rings, compiled once per session."""
    build = tmp_path_factory.mktemp("decode_gather_sass")
    source = build / "decode_gather_prebuilt.cu"
    source.write_text(decode_gather_source(decode_gather_rings, decode_gather_header))
    common = dict(include_dirs=decode_gather_include_dirs, flags=cuda_cflags, nvcc=nvcc, disassembler=disassembler,
                  cache=sass_cache)
    return _scan_all([(a, source, a, build / f"sm_{a}", {}) for a in ARCHS], common)


@pytest.fixture(scope="session")
def control_reports(tmp_path_factory, nvcc, disassembler, cuda_cflags, sass_cache) -> dict:
    """(control, arch) -> SassReport of the negative controls, compiled once per session."""
    build = tmp_path_factory.mktemp("control_sass")
    wanted = [
        ("bulk_copy_cluster", 120),  # must be flagged: CALL.ABS.NOINC
        ("bulk_copy_cluster", 90),  # same PTX, native UBLKCP: the scanner discriminates
        ("local_array", 80),
        ("local_array", 120),
        ("register_spill", 120),
    ]
    jobs = [((name, arch), CONTROLS / f"{name}.cu", arch, build / f"{name}_sm_{arch}", {}) for name, arch in wanted]
    common = dict(flags=cuda_cflags, nvcc=nvcc, disassembler=disassembler, cache=sass_cache)
    return _scan_all(jobs, common)


def _kernel_functions(report: SassReport) -> list[FunctionReport]:
    """decode_gather's kernels in the cubin, after checking both index instantiations are among them."""
    for fragment, idx in DECODE_GATHER_INSTANTIATIONS.items():
        assert report.find(fragment), (
            f"sm_{report.arch}: no {idx}-index decode_gather instantiation ({fragment}...) among "
            f"{[f.name for f in report.functions]}"
        )
    return [f for f in report.functions if is_decode_gather(f)]


# --------------------------------------------------------------------------------------------
# the kernel
# --------------------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: f"sm_{a}")
def test_both_index_instantiations_scanned(decode_gather_reports, decode_gather_rings, arch):
    report = _get(decode_gather_reports, arch)
    functions = _kernel_functions(report)
    # both index widths of every prebuilt ring
    assert len(functions) == len(DECODE_GATHER_INSTANTIATIONS) * len(decode_gather_rings), [f.name for f in functions]
    for f in functions:
        assert f.instructions > 0, f"{f.name}: no instructions parsed from the disassembly"
        assert f.entry, f"{f.name}: ptxas -v reported no entry function of that name"
        assert None not in (f.registers, f.stack_frame_bytes, f.spill_store_bytes, f.spill_load_bytes), (
            f"{f.name}: ptxas -v stats not parsed: {f.summary()}\n{report.ptxas_log}"
        )
        if f.res_usage is not None:  # cuobjdump -res-usage: an independent reading of the same ELF
            assert f.res_usage.get("REG") == f.registers, (f.res_usage, f.registers)
            assert f.res_usage.get("STACK") == f.stack_frame_bytes, (f.res_usage, f.stack_frame_bytes)


@pytest.mark.integration
@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: f"sm_{a}")
def test_bulk_copy_engine_exactly_on_sm90_and_newer(decode_gather_reports, arch):
    report = _get(decode_gather_reports, arch)
    for f in _kernel_functions(report):
        if expects_ublkcp(arch):
            assert f.count("UBLKCP.S.G") > 0, f"sm_{arch} {f.short_name}: no UBLKCP.S.G (host -> smem bulk load)"
            assert f.count("UBLKCP.G.S") > 0, f"sm_{arch} {f.short_name}: no UBLKCP.G.S (smem -> slot bulk store)"
        else:
            assert not f.ublkcp, f"sm_{arch} {f.short_name}: UBLKCP below sm_90: {[str(s) for s in f.ublkcp]}"
            assert any(op.startswith("BPT.TRAP") for op in f.opcodes), (
                f"sm_{arch} {f.short_name}: the pre-sm_90 stub does not trap: {sorted(f.opcodes)}"
            )


@pytest.mark.integration
@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: f"sm_{a}")
def test_no_call_abs_noinc_nor_any_call(decode_gather_reports, arch):
    report = _get(decode_gather_reports, arch)
    _kernel_functions(report)
    assert not report.call_abs_noinc_sites, [str(s) for s in report.call_abs_noinc_sites]
    assert not report.call_sites, [str(s) for s in report.call_sites]
    assert not report.syscalls, f"sm_{arch}: the cubin references driver routines {report.syscalls}"


@pytest.mark.integration
@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: f"sm_{a}")
def test_zero_byte_stack_frame(decode_gather_reports, arch):
    report = _get(decode_gather_reports, arch)
    for f in _kernel_functions(report):
        assert f.stack_frame_bytes == 0, f"sm_{arch} {f.short_name}: {f.stack_frame_bytes}-byte stack frame"


@pytest.mark.integration
@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: f"sm_{a}")
def test_no_local_memory(decode_gather_reports, arch):
    report = _get(decode_gather_reports, arch)
    for f in _kernel_functions(report):
        assert f.local_accesses == 0, f"sm_{arch} {f.short_name}: {f.local_loads} LDL, {f.local_stores} STL"


@pytest.mark.integration
@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: f"sm_{a}")
def test_no_spills(decode_gather_reports, arch):
    report = _get(decode_gather_reports, arch)
    for f in _kernel_functions(report):
        assert f.spill_store_bytes == 0 and f.spill_load_bytes == 0, (
            f"sm_{arch} {f.short_name}: spills {f.spill_store_bytes} B stored, {f.spill_load_bytes} B loaded"
        )


@pytest.mark.integration
@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: f"sm_{a}")
def test_script_check_agrees(decode_gather_reports, arch):
    """`python -m conformance.sass --check` applies decode_gather_violations(): it must agree."""
    assert decode_gather_violations(_get(decode_gather_reports, arch)) == []


@pytest.mark.integration
def test_record_register_counts(decode_gather_reports):
    """Registers parsed for every kernel (the table is printed; ``nox -s sass`` records it in results/sass.json)."""
    reports = [_get(decode_gather_reports, a) for a in ARCHS]
    for r in reports:
        for f in r.functions:
            # __launch_bounds__(32, 1): the cap is the ISA's 255; 0 means the line was not parsed
            assert f.registers is not None and 0 < f.registers <= 255, (r.arch, f.name, f.registers)
    print("\n" + format_table(reports))


@pytest.mark.integration
def test_nvdisasm_reads_the_same_sass(decode_gather_reports, sass_cache):
    """The nvdisasm fallback parser sees the same instructions as cuobjdump (sm_120 cubin)."""
    report = _get(decode_gather_reports, 120)
    if report.disassembler != "cuobjdump":
        pytest.skip("the session's disassembler is already nvdisasm; nothing to compare against")
    nvdisasm = toolchain.find_tool("nvdisasm")
    if nvdisasm is None:
        pytest.skip("no nvdisasm to compare with (set NVDISASM, or pip install nvidia-cuda-nvdisasm)")
    other = scan_cubin(report.cubin, 120, report.ptxas_log, Disassembler("nvdisasm", nvdisasm, cache=sass_cache))
    assert {f.name: f.opcodes for f in other.functions} == {f.name: f.opcodes for f in report.functions}
    assert other.syscalls == report.syscalls


# --------------------------------------------------------------------------------------------
# negative controls: the same scanner must flag each defect
# --------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_control_cluster_form_calls_a_driver_routine_on_sm120(control_reports):
    report = _get(control_reports, ("bulk_copy_cluster", 120))
    assert report.functions and report.functions[0].instructions > 0
    assert report.call_abs_noinc_sites, (
        "nvcc no longer lowers cp.async.bulk.shared::cluster to CALL.ABS.NOINC on sm_120 (or the scanner "
        f"misses it): calls={[str(s) for s in report.call_sites]}, opcodes={report.functions[0].opcodes}"
    )
    assert any(name.startswith("__cuda_syscall") for name in report.syscalls), report.syscalls
    problems = decode_gather_violations(report)
    assert any("CALL.ABS.NOINC" in p for p in problems), problems


@pytest.mark.integration
def test_control_cluster_form_is_native_on_sm90(control_reports):
    """The scanner discriminates: the same PTX on sm_90 is a native UBLKCP and no call."""
    report = _get(control_reports, ("bulk_copy_cluster", 90))
    assert report.has_ublkcp, report.functions[0].opcodes
    assert not report.call_sites, [str(s) for s in report.call_sites]


@pytest.mark.integration
@pytest.mark.parametrize("arch", (80, 120), ids=lambda a: f"sm_{a}")
def test_control_local_array_is_flagged(control_reports, arch):
    report = _get(control_reports, ("local_array", arch))
    assert report.ldl_stl_count > 0, report.functions[0].opcodes
    assert report.max_stack_frame_bytes and report.max_stack_frame_bytes > 0, report.ptxas_log
    problems = decode_gather_violations(report)
    assert any("LDL" in p for p in problems), problems
    assert any("stack frame" in p for p in problems), problems


@pytest.mark.integration
def test_control_register_spill_is_flagged(control_reports):
    report = _get(control_reports, ("register_spill", 120))
    assert report.spill_bytes and report.spill_bytes > 0, report.ptxas_log
    problems = decode_gather_violations(report)
    assert any("spills" in p for p in problems), problems


# --------------------------------------------------------------------------------------------
# the scanner's own plumbing (no toolchain needed)
# --------------------------------------------------------------------------------------------


def test_parsers_on_canned_output():
    ptxas = """\
ptxas info    : Compiling entry function '_Z1kv' for 'sm_120'
ptxas info    : Function properties for _Z1kv
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 16 bytes cumulative stack size, 384 bytes smem
"""
    stats = parse_ptxas(ptxas)["_Z1kv"]
    assert (stats.registers, stats.stack_frame_bytes, stats.spill_store_bytes, stats.spill_load_bytes, stats.smem_bytes) == (
        40, 16, 8, 4, 384,
    )
    listing = """\
\t\tFunction : _Z1kv
        /*0000*/                   LDC R1, c[0x0][0x37c] ;                 /* 0x00000df0ff017b82 */
                                                                           /* 0x000fe20000000800 */
        /*0010*/               @P0 CALL.ABS.NOINC R2 ;                     /* 0x0000000002007343 */
        /*0020*/              @!PT LDL.64 R4, [R1+0x8] ;                   /* 0x0000000001047983 */
        /*0030*/                   UBLKCP.S.G [UR4], [UR6], UR8 ;          /* 0x00000004060073ba */
        /*0040*/                   STL.128 [R1], RZ ;                      /* 0x000000ff01007387 */
"""
    insns = parse_sass(listing)["_Z1kv"]
    assert [i.opcode for i in insns] == ["LDC", "CALL.ABS.NOINC", "LDL.64", "UBLKCP.S.G", "STL.128"]
    assert [i.predicate for i in insns][1:3] == ["@P0", "@!PT"]


def test_bad_tool_override_is_reported(monkeypatch):
    monkeypatch.setenv("CUOBJDUMP", "/nonexistent/cuobjdump")
    with pytest.raises(toolchain.ToolNotFound, match="CUOBJDUMP"):
        find_disassembler()


def test_missing_disassembler_names_what_to_install(monkeypatch, tmp_path):
    for env in ("CUOBJDUMP", "NVDISASM"):
        monkeypatch.delenv(env, raising=False)
    for env in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(toolchain, "DEFAULT_CUDA_HOME", str(tmp_path))
    monkeypatch.setattr(toolchain, "package_dirs", lambda name: [])
    assert find_disassembler() is None
    with pytest.raises(toolchain.ToolNotFound, match="nvidia-cuda-cuobjdump"):
        require_disassembler()


def test_missing_freetoken_is_named(monkeypatch):
    monkeypatch.setattr(sass_build, "_package_dirs", lambda name: [])
    with pytest.raises(LookupError, match="freetoken package is not installed"):
        decode_gather_header()
