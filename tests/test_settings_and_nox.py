"""CPU tests of the overlay's settings, its command line and the nox sessions around it: bad values
are named, the noxfile imports under bare ``nox``, GPU sessions skip alike without a GPU.

The overlay's own steps (pin, apply/export, the patched wheel) are tests/test_overlay.py's.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from suite.commands import MEASUREMENTS
from freetoken_overlay import kernel_cache, series, sessions
from freetoken_overlay.pin import get_pin
from freetoken_overlay.series import series_hash
from freetoken_overlay.util import (
    NOX_COMMAND_ENV,
    NOX_ENV,
    NOX_RUN_ENV,
    REPO_ROOT,
    REQUIRE_GPU_ENV,
    VERBOSE_ENV,
    OverlayError,
    Workdir,
    env_flag,
)

from helpers import overlay  # noqa: E402


# --------------------------------------------------------------------------- settings


def test_bad_settings_are_named(monkeypatch) -> None:
    with pytest.raises(OverlayError, match=r"FT_OVERLAY_SYSTEM_SITE='maybe'.*allowed values"):
        env_flag("FT_OVERLAY_SYSTEM_SITE", {"FT_OVERLAY_SYSTEM_SITE": "maybe"})
    with pytest.raises(OverlayError, match=r"'9\.9\.9'.*allowed values: 0\.2\.0, 0\.2\.1"):
        get_pin("9.9.9")
    monkeypatch.setenv(kernel_cache.CUDA_ARCH_LIST_ENV, "9.0 sm90")
    with pytest.raises(OverlayError, match=r"TVM_FFI_CUDA_ARCH_LIST='9.0 sm90': sm90 .*allowed values"):
        kernel_cache.cuda_arch_list()


@pytest.mark.integration
@pytest.mark.parametrize("name", [VERBOSE_ENV, "FT_OVERLAY_SYSTEM_SITE", REQUIRE_GPU_ENV])
def test_boolean_settings_share_one_parser(name: str, tmp_path: Path) -> None:
    """Both are refused when misspelt, by every command (series-hash reads neither)."""
    proc = overlay("series-hash", workdir=tmp_path, check=False, env={name: "maybe"})
    assert proc.returncode == 1
    assert f"{name}='maybe' is not a boolean; allowed values: '1', 'true', 'yes', 'on', '', '0'" in proc.stderr
    assert overlay("series-hash", workdir=tmp_path, env={name: "Yes"}).stdout.strip() == series_hash()


@pytest.mark.integration
def test_relative_workdir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OverlayError, match=r"FT_OVERLAY_WORKDIR='work' is a relative path; allowed: an absolute"):
        Workdir.from_env({"FT_OVERLAY_WORKDIR": "work"})
    assert Workdir.from_env({"FT_OVERLAY_WORKDIR": str(tmp_path)}).root == tmp_path
    assert Workdir.from_env({"FT_OVERLAY_WORKDIR": "~/w"}).root == Path.home() / "w"
    proc = overlay("apply", workdir=Path("work"), check=False)
    assert proc.returncode == 1 and "FT_OVERLAY_WORKDIR='work' is a relative path" in proc.stderr
    assert not (REPO_ROOT / "work").exists()


@pytest.mark.integration
def test_verbose_only_where_pip_runs(tmp_path: Path) -> None:
    for command in ("export", "series-hash"):
        proc = overlay(command, "-v", workdir=tmp_path, check=False)
        assert proc.returncode == 2 and "unrecognized arguments: -v" in proc.stderr
    for command in ("apply", "build", "build-wheel", "build-kernels", "verify", "wheelhouse"):
        assert "--verbose" in overlay(command, "--help", workdir=tmp_path).stdout


@pytest.mark.integration
def test_build_without_torch_says_what_to_install(tmp_path: Path, workdir: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", NOX_ENV, NOX_COMMAND_ENV)}
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "freetoken_overlay", "build"], cwd=REPO_ROOT,
        env={**env, "FT_OVERLAY_WORKDIR": str(workdir)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "this Python" in proc.stderr and "has no module 'torch'" in proc.stderr
    assert "nox -s build" in proc.stderr and " -m pip install torch==" in proc.stderr
    assert not (workdir / "upstream").exists()  # it stopped before doing anything


@pytest.mark.integration
def test_bare_nox_imports_the_noxfile(tmp_path: Path) -> None:
    """`nox` (its own script, not `python3 -m nox`) does not put the checkout on sys.path."""
    nox = shutil.which("nox", path=os.environ.get("PATH", "").replace(str(Path(sys.executable).parent), ""))
    if nox is None:
        pytest.skip("no nox on PATH")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", NOX_ENV, NOX_COMMAND_ENV)}
    proc = subprocess.run([nox, "-l"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "* test" in proc.stdout
    assert "\n- patched" in proc.stdout  # what build, test and sass require, never chosen: not marked selected


def test_kernel_cache_built_for_this_series_is_used() -> None:
    """Under `nox -s test`, a kernel cache `nox -s build` made is the one used, built for the installed freetoken: one
    built for another series (any change to patches/) was dropped quietly, and 2 tests fewer ran, exit 0."""
    if not os.environ.get(NOX_ENV):
        pytest.skip("checks the environment nox -s test sets up")
    manifest = Workdir.from_env().kernel_cache / "MANIFEST.json"
    if not manifest.is_file():
        pytest.skip(f"no kernel cache at {manifest.parent} (nox -s build makes it)")
    assert json.loads(manifest.read_text()).get("freetoken") == importlib.metadata.version("freetoken")
    assert os.environ.get("FREETOKEN_KERNEL_CACHE_DIR") == str(manifest.parent)


def _manifest(cache: Path, freetoken: str, specs: list[str], archs: str = "9.0") -> None:
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "MANIFEST.json").write_text(json.dumps({"freetoken": freetoken, "specs": specs, "cuda_arch_list": archs}))


def test_a_kernel_cache_for_another_series_is_rebuilt_first(tmp_path: Path, monkeypatch) -> None:
    """None at all (CI's fresh clone): no cache, said so (the tests that need one skip).  One for another series is
    rebuilt with the set and architectures it was built with, then used; one still stale after that is an error
    naming the command that rebuilds it."""
    monkeypatch.delenv(kernel_cache.CUDA_ARCH_LIST_ENV, raising=False)
    cache, said, rebuilt = tmp_path / "kernel-cache", [], []

    def use(rebuild=lambda settings: None):
        return kernel_cache.kernel_cache_for(cache, "0.2.1+dg.new", rebuild=rebuild, log=said.append)

    assert use() is None and said[-1] == f"no kernel cache at {cache} (nox -s build makes it); tests that need one skip"
    _manifest(cache, "0.2.1+dg.new", [f"{kernel_cache.SPEC_PREFIX}_16_4_8192"])
    assert use() == cache and rebuilt == []
    specs = [f"{kernel_cache.SPEC_PREFIX}_16_4_8192", f"{kernel_cache.FULL_SET_PREFIX}_1024_8"]
    _manifest(cache, "0.2.1+dg.old", specs, "9.0 10.0")

    def rebuild(settings: dict[str, str]) -> None:
        rebuilt.append(settings)
        _manifest(cache, "0.2.1+dg.new", [])

    assert use(rebuild) == cache
    assert rebuilt == [{kernel_cache.KERNEL_SET_ENV: "full", kernel_cache.CUDA_ARCH_LIST_ENV: "9.0 10.0"}]
    assert "is for freetoken 0.2.1+dg.old, not 0.2.1+dg.new: rebuilding it" in said[-2]
    _manifest(cache, "0.2.1+dg.old", [])
    with pytest.raises(OverlayError, match=r"for freetoken 0.2.1\+dg.old, not 0.2.1\+dg.new, after rebuilding it; "
                                           r"run nox -s build"):  # fmt: skip
        use()


@pytest.mark.integration
def test_cli_version_release_and_help(tmp_path: Path) -> None:
    proc = overlay("--version", workdir=tmp_path)
    assert proc.stdout.startswith("freetoken_overlay 0.1.0 ")
    help_text = overlay("apply", "--help", workdir=tmp_path, env={"COLUMNS": "400"}).stdout
    assert "--release {0.2.0,0.2.1}" in help_text and f"(default: {series.PATCHES_DIR})" in help_text
    proc = overlay("apply", "--release", "9.9", workdir=tmp_path, check=False)
    assert proc.returncode == 2 and "invalid choice: '9.9'" in proc.stderr


def test_nox_list_prints_no_developer_notes() -> None:
    import ast

    doc = ast.get_docstring(ast.parse((REPO_ROOT / "noxfile.py").read_text()))
    assert doc is not None and len(doc.splitlines()) <= 3 and "FT_OVERLAY_" not in doc


@pytest.mark.integration
def test_missing_wheelhouse_is_named(tmp_path: Path) -> None:
    proc = overlay("apply", workdir=tmp_path, check=False, env={"FT_OVERLAY_WHEELHOUSE": str(tmp_path / "nope")})
    assert proc.returncode == 1 and "FT_OVERLAY_WHEELHOUSE=" in proc.stderr and "no such directory" in proc.stderr


@pytest.mark.integration
def test_wheelhouse_onto_a_file_and_an_empty_series_are_named(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("not a directory\n")
    proc = overlay("wheelhouse", str(file), workdir=tmp_path / "work", check=False)
    assert proc.returncode == 1 and "exists and is not a directory" in proc.stderr and "Traceback" not in proc.stderr
    proc = overlay("series-hash", "--patches", str(tmp_path), workdir=tmp_path / "work", check=False)
    assert proc.returncode == 1 and "holds no *.patch files" in proc.stderr and proc.stdout == ""


@pytest.mark.integration
def test_gpu_sessions_without_a_gpu_all_say_so_alike(tmp_path: Path) -> None:
    """Every GPU session on a machine without one, `nox -t gpu` as a new user runs it: the same message, skipped (e2e
    too, before its usage; contention counts the two GPUs it needs), exit 0, and no venv made (each made 12 MB)."""
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    nox = shutil.which("nox", path=os.environ.get("PATH", "").replace(str(Path(sys.executable).parent), ""))
    if nox is None:
        pytest.skip("no nox on PATH")
    env = {k: v for k, v in os.environ.items() if k not in (NOX_ENV, NOX_COMMAND_ENV, "VIRTUAL_ENV")}
    envdir = tmp_path / "envs"
    proc = subprocess.run([nox, "--envdir", str(envdir), "-t", "gpu"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    sessions = [m for m in MEASUREMENTS.values() if m.session and m.gpu]
    assert {m.name for m in sessions} >= {"gpu", "sanitize", "bench", "e2e", "contention"}
    for m in sessions:
        needs = "a CUDA GPU" if m.gpus == 1 else f"{m.gpus} CUDA GPUs"
        assert f"Session {m.name} skipped: nox -s {m.name} needs {needs} (nvidia-smi finds none here)" in out, out
    assert "uv binary not found" not in out and "pip install" not in out and not envdir.exists()
    proc = subprocess.run([nox, "--envdir", str(envdir), "-t", "gpu"], cwd=REPO_ROOT, env={**env, REQUIRE_GPU_ENV: "1"},
                          capture_output=True, text=True, check=False)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # a script tells a skipped session from a passed one
    for m in sessions:
        assert f"Session {m.name} aborted: nox -s {m.name} needs " in out
    assert out.count(f"; {REQUIRE_GPU_ENV}=1 makes that a failure") == len(sessions)


@pytest.mark.integration
def test_build_test_and_sass_share_one_venv() -> None:
    """One CPU torch install: build, test, quick and sass make no venv; each brings in (nox's ``requires``) the session
    ``patched``, whose venv (.nox/patched/) they run in."""
    nox = shutil.which("nox", path=os.environ.get("PATH", "").replace(str(Path(sys.executable).parent), ""))
    if nox is None:
        pytest.skip("no nox on PATH")
    env = {k: v for k, v in os.environ.items() if k not in (NOX_ENV, NOX_COMMAND_ENV, "VIRTUAL_ENV")}
    for name in ("build", "test", "quick", "sass"):
        proc = subprocess.run([nox, "-l", "--json", "-s", name], cwd=REPO_ROOT, env=env, capture_output=True,
                              text=True, check=True)  # fmt: skip
        selected = {s["session"]: s["python"] for s in json.loads(proc.stdout)}
        assert selected == {"patched": None, name: False}, selected  # None: nox's own venv; False: none


@pytest.mark.integration
def test_skips_are_summed_up_by_reason_above_the_counts(tmp_path: Path) -> None:
    """-rs printed a line per test location (37 on this CPU machine) before the counts; the checkout's conftest.py
    sums them up, one line per reason with its files (-rs, given, still prints pytest's own lines instead)."""
    (tmp_path / "conftest.py").write_bytes((REPO_ROOT / "conftest.py").read_bytes())  # the hook under test
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # its own root, not the checkout (tmp_path is in .work/)
    for name in ("test_a.py", "test_b.py", "test_c.py"):
        (tmp_path / name).write_text("import pytest\n\ndef test_1():\n    pytest.skip('no GPU')\n\n"
                                     "def test_2():\n    pytest.skip('no GPU')\n")  # fmt: skip
    (tmp_path / "test_d.py").write_text("import pytest\n\n@pytest.mark.skip(reason='later')\ndef test_1():\n    pass\n")

    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"], cwd=tmp_path,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    assert [line for line in lines if line.startswith("SKIPPED")] == [
        "SKIPPED [6] no GPU (test_a.py, test_b.py and 1 more files)", "SKIPPED [1] later (test_d.py)"]  # fmt: skip
    assert lines[-1].startswith("=") and "7 skipped" in lines[-1]


@pytest.mark.integration
def test_args_after_dashes_keep_the_spread_unless_they_choose(tmp_path: Path) -> None:
    """Any `--` argument dropped `-n auto`: `nox -s test -- tests/x.py` ran in one process.  Now it is kept unless the
    arguments choose the processes; `nox -s quick` leaves the integration and slow tests out."""
    if not os.environ.get(NOX_ENV):
        pytest.skip("runs nox -R in the shared venv nox -s test made")
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi: no -n auto")
    nox = shutil.which("nox", path=os.environ.get("PATH", "").replace(str(Path(sys.executable).parent), ""))
    if nox is None:
        pytest.skip("no nox on PATH")
    env = {k: v for k, v in os.environ.items()
           if k not in (NOX_ENV, NOX_COMMAND_ENV, NOX_RUN_ENV, "NOX_CURRENT_SESSION", "VIRTUAL_ENV")}  # fmt: skip

    def pytest_line(*args: str) -> str:  # its own --basetemp: the session's is the running one's
        proc = subprocess.run([nox, "-R", *args, "--collect-only", f"--basetemp={tmp_path}", "tests/test_rounds.py"],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True)  # fmt: skip
        return next(line for line in (proc.stdout + proc.stderr).splitlines() if " -m pytest " in line)

    assert (" -m pytest -n auto --dist loadgroup -m 'not integration and not slow' --collect-only "
            in pytest_line("-s", "quick", "--"))
    assert " -m pytest -n 0 --collect-only " in pytest_line("-s", "test", "--", "-n", "0")


def test_the_tests_environment_leaves_out_what_chooses_what_is_under_test(tmp_path: Path) -> None:
    environ = {"FREETOKEN_DECODE_GATHER": "bogus", "FREETOKEN_DECODE_GATHER_RING": "garbage",
               "FREETOKEN_H2D_BLOCKS_PER_BANK": "3", "FREETOKEN_BENCHBW_PATH": "/x",
               "FREETOKEN_KERNEL_CACHE_DIR": "/cache", "FREETOKEN_DISABLE_JIT": "1",
               "XDG_CACHE_HOME": "/home/u/.cache", "TMPDIR": "/tmp", "PATH": "/bin"}  # fmt: skip
    env, basetemp = sessions.test_env(Workdir(tmp_path), "test", environ)
    assert {k: v for k, v in env.items() if v is None} == dict.fromkeys(list(environ)[:4])
    folder = tmp_path / "session" / "test"
    assert env["TMPDIR"] == str(folder / "tmp") and env["XDG_CACHE_HOME"] == str(folder / "cache")
    assert basetemp == folder / "pytest" and Path(env["TMPDIR"]).is_dir()
    assert not {"FREETOKEN_KERNEL_CACHE_DIR", "FREETOKEN_DISABLE_JIT", "PATH"} & set(env)  # kept as they are


@pytest.mark.integration
def test_the_users_choice_of_kernel_changes_no_verdict(tmp_path: Path) -> None:
    """With FREETOKEN_DECODE_GATHER=bogus and FREETOKEN_DECODE_GATHER_RING=garbage exported (some of the series'
    tests failed), a test sees neither, nor a temporary directory outside the work directory."""
    if not os.environ.get(NOX_ENV):
        pytest.skip("runs nox -R in the shared venv nox -s test made")
    nox = shutil.which("nox", path=os.environ.get("PATH", "").replace(str(Path(sys.executable).parent), ""))
    if nox is None:
        pytest.skip("no nox on PATH")
    workdir = Workdir.from_env()
    check = tmp_path / "test_environment.py"
    check.write_text("import os, tempfile\n\ndef test_environment():\n"
                     "    assert not [k for k in os.environ if k.startswith('FREETOKEN_DECODE_GATHER')]\n"
                     f"    assert tempfile.gettempdir().startswith({str(workdir.root)!r})\n")  # fmt: skip
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NOX_", "PYTEST_", "FT_OVERLAY_NOX", "TMPDIR", "VIRTUAL_ENV"))}  # fmt: skip
    env.update(FREETOKEN_DECODE_GATHER="bogus", FREETOKEN_DECODE_GATHER_RING="garbage")
    proc = subprocess.run([nox, "-R", "-s", "quick", "--", f"--basetemp={tmp_path / 'base'}", "-p", "no:cacheprovider",
                           str(check)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "cleared FREETOKEN_DECODE_GATHER='bogus', FREETOKEN_DECODE_GATHER_RING='garbage'" in out


@pytest.mark.integration
def test_importing_the_noxfile_starts_nothing_and_changes_no_variable(tmp_path: Path) -> None:
    """It ran nvidia-smi and set FT_OVERLAY_NOX* as it loaded; now the sessions do what they need as they run."""
    python = shutil.which("python3", path=os.environ.get("PATH", "").replace(str(Path(sys.executable).parent), ""))
    if python is None or subprocess.run([python, "-c", "import nox"], capture_output=True).returncode != 0:
        pytest.skip("no python3 with nox on PATH")
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\ntouch {tmp_path / 'smi-ran'}\necho 'GPU 0: NVIDIA H100'\n")
    smi.chmod(0o755)
    code = ("import importlib.util, json, os, sys\n"
            "started = []\n"
            "sys.addaudithook(lambda event, args: started.append(event) if event in ('subprocess.Popen', 'os.system', "
            "'os.fork', 'os.forkpty', 'os.posix_spawn', 'os.exec', 'os.spawn') else None)\n"
            "before = dict(os.environ)\n"
            f"spec = importlib.util.spec_from_file_location('noxfile', {str(REPO_ROOT / 'noxfile.py')!r})\n"
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "print(json.dumps({'started': started, 'environ': dict(os.environ) == before}))\n")  # fmt: skip
    env = {**os.environ, "PATH": f"{smi.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([python, "-c", code, "-s", "test"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"started": [], "environ": True}
    assert not (tmp_path / "smi-ran").exists()
