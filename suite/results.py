"""Where results go (``results/<device>[x<gpus>]/[<folder>/]<name>.json`` for each measurement of
:data:`suite.commands.MEASUREMENTS`; ``sass.json`` has no device), the device slug, the provenance, and the
one writer (:func:`save`) and reader (:func:`load`) of result documents.

Every document starts with its schema id, the time it was made (not ``sass``, which must re-render
byte-identical), its provenance and the machine; machine paths are scrubbed. A document is written whole
by one run; the one it replaces is moved, not lost: to ``<device>/history/<tree-id>/<stem>.<N>.json``
(:func:`supersede`, which never overwrites a kept file). The device slug (``NVIDIA H200`` -> ``h200``) is
``$FT_RESULTS_DEVICE``, else CUDA device 0's name, else ``unknown``; the root ``$FT_RESULTS_DIR`` or ``results/``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from suite.commands import MEASUREMENTS

REPO_ROOT = Path(__file__).resolve().parents[1]
ROOT_ENV = "FT_RESULTS_DIR"
DEVICE_ENV = "FT_RESULTS_DEVICE"


def root() -> Path:
    """The results directory: ``$FT_RESULTS_DIR`` (relative to the checkout) or ``<checkout>/results``."""
    raw = os.environ.get(ROOT_ENV, "").strip()
    return (REPO_ROOT / raw) if raw else REPO_ROOT / "results"


def device_slug(name: str | None = None) -> str:
    """The slug of GPU ``name`` ('NVIDIA GeForce RTX 5090' -> 'geforce-rtx-5090'); without a name,
    this machine's (resolved once: ``$FT_RESULTS_DEVICE``, else CUDA device 0, else 'unknown')."""
    if name is None:
        return _this_device()
    s = re.sub(r"^nvidia\s+", "", name.strip().lower())
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-") or "unknown"


@functools.lru_cache(maxsize=1)
def _this_device() -> str:
    if explicit := os.environ.get(DEVICE_ENV, "").strip():
        return explicit
    try:
        import torch

        name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:
        name = None
    return device_slug(name or "unknown")


def device_dir(device: str | None = None, gpus: int = 1) -> Path:
    """``results/<device>/`` (``<device>x<gpus>`` for a run on several GPUs)."""
    slug = device or device_slug()
    return root() / (f"{slug}x{gpus}" if gpus > 1 else slug)


def path(kind: str, device: str | None = None, out_dir: str | os.PathLike | None = None) -> Path:
    """The file of ``kind`` for ``device`` (this machine's by default); ``out_dir`` takes the file
    (its base name) somewhere else instead, e.g. a dry run's temporary directory."""
    k = MEASUREMENTS[kind]
    if out_dir is not None:
        return Path(out_dir) / Path(k.file).name
    return (device_dir(device, k.gpus) if k.per_device else root()) / k.file


def _git(repo: Path, *args: str, stdin: str | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def freetoken_version() -> str | None:
    """The installed freetoken's version (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("freetoken")
    except PackageNotFoundError:
        return None


def series_of_version(version: str | None) -> str | None:
    """``<series>`` of a patched wheel's version ``<version>+dg.<series>`` (None: not a patched wheel's)."""
    from freetoken_overlay.wheel import LOCAL_LABEL

    label, _, series = (version or "").partition("+")[2].partition(".")
    return series if label == LOCAL_LABEL and series else None


def installed_series() -> str | None:
    return series_of_version(freetoken_version())  # None: not a patched wheel


def _work_repo() -> Path:
    from freetoken_overlay.series import work_repo
    from freetoken_overlay.util import Workdir

    return work_repo(Workdir.from_env())


def patched_tree(repo: Path | None = None) -> str | None:
    """``git rev-parse decode-gather^{tree}`` in the work repository."""
    from freetoken_overlay.series import BRANCH

    repo = repo or _work_repo()
    return _git(repo, "rev-parse", f"{BRANCH}^{{tree}}") if repo.is_dir() else None


def series_patch_id(repo: Path | None = None) -> str | None:
    """``git patch-id --stable`` of the diff from the pinned base tag to the series branch."""
    from freetoken_overlay import pin
    from freetoken_overlay.series import BRANCH

    repo = repo or _work_repo()
    diff = _git(repo, "diff", "--full-index", f"{pin.get_pin().tag}..{BRANCH}") if repo.is_dir() else None
    out = _git(repo, "patch-id", "--stable", stdin=diff + "\n") if diff else None
    return out.split()[0] if out else None


@functools.lru_cache(maxsize=1)
def provenance() -> dict[str, Any]:
    """``{"series_hash", "series_from", "tree", "patch_id"}`` of the freetoken this process measures."""
    from freetoken_overlay.series import series_hash

    try:
        checkout = series_hash()
    except OSError:
        checkout = None
    installed = installed_series()
    series = installed or checkout
    same = series is not None and series == checkout  # .work/upstream is applied from this checkout's patches/
    return {
        "series_hash": series,
        "series_from": "installed freetoken" if installed else ("checkout patches/" if checkout else None),
        "tree": patched_tree() if same else None,
        "patch_id": series_patch_id() if same else None,
    }


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def document(kind: str, *, machine: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """A new document of ``kind``: schema id, time (where the kind keeps one), provenance, machine, ``fields``."""
    k = MEASUREMENTS[kind]
    doc: dict[str, Any] = {"schema": k.schema}
    if k.timestamped:
        doc["generated_at"] = now_iso()
    doc["provenance"] = provenance()
    if machine is not None:
        doc["machine"] = machine
    doc.update(fields)
    return scrub(doc)


def save(kind: str, *, machine: dict[str, Any] | None = None, device: str | None = None,
         out_dir: str | os.PathLike | None = None, keep_replaced: bool = True, markdown: str | None = None,
         **fields: Any) -> Path:  # fmt: skip
    """The one writer of our documents: a new document of ``kind`` to :func:`path` (``device`` defaults to the
    machine's slug) and, with ``markdown``, that text beside it (``.md``), its first line an HTML comment naming
    the document's run and provenance (invisible once pasted). What each file replaces goes to the history
    first (:func:`supersede`), unless ``keep_replaced`` is False: a run that saves as it goes replaces only its
    own earlier save (it kept the one before it at its start). Returns the document's path."""
    target = path(kind, device or (machine or {}).get("device_slug"), out_dir)
    doc = document(kind, machine=machine, **fields)
    files = {target: dumps(doc)}
    if markdown is not None:
        p = doc["provenance"]
        head = (f"<!-- {target.name} of {doc.get('generated_at')}: series {p.get('series_hash')} "
                f"({p.get('series_from')}), tree {p.get('tree')}, patch-id {p.get('patch_id')} -->")  # fmt: skip
        files[target.with_suffix(".md")] = head + "\n" + markdown
    for file, text in files.items():
        if keep_replaced:
            supersede(kind, file, text)
        _write(file, text)
    return target


#: under a device's directory: ``history/tree-<tree id>/<file>.<N>.json``, the documents a run replaced
HISTORY = "history"


def history_folder(doc: Any) -> str:
    """``tree-<12 hex>`` of the patched tree ``doc`` was measured on (``series-<hash>`` where only the
    series is known, ``tree-unknown`` where neither is)."""
    prov = (doc.get("provenance") if isinstance(doc, dict) else None) or {}
    if prov.get("tree"):
        return f"tree-{prov['tree'][:12]}"
    return f"series-{prov['series_hash'][:12]}" if prov.get("series_hash") else "tree-unknown"


def history(kind: str, device: str | None = None, tree: str | None = None, base: Path | None = None) -> list[Path]:
    """The documents of ``kind`` kept in ``<base>/<device>/history/tree-<tree>/`` (every tree's without
    ``tree``), in the order they were replaced."""
    k = MEASUREMENTS[kind]
    rel, home = Path(k.file), _home(k, base or root(), device)
    folders = [home / HISTORY / f"tree-{tree[:12]}"] if tree else sorted((home / HISTORY).glob("*/"))
    found = [p for f in folders for p in (f / rel.parent).glob(f"{rel.stem}.*{rel.suffix}")]
    return sorted(found, key=lambda p: (p.parent, _run_number(p)))


def _run_number(p: Path) -> int:
    number = p.name[: -len(p.suffix)].rpartition(".")[2]
    return int(number) if number.isdigit() else 0


def supersede(kind: str, target: Path, new_text: str | None = None) -> Path | None:
    """Move the file at ``target`` (a document of ``kind``, or the text saved beside it) to the history of the
    directory it is in: ``history/<tree-id>/<file stem>.<N><suffix>``, N one more than the last kept there,
    the tree the document's provenance names (a text's first line). Nothing moves when there is no file, or
    when it holds ``new_text`` already (a re-run that changed nothing). Returns where it went (None: nothing
    moved). Never overwrites: :func:`move_new` refuses an existing file."""
    if not target.is_file():
        return None
    old_text = target.read_text(errors="replace")
    if new_text is not None and old_text == new_text:
        return None
    rel = Path(MEASUREMENTS[kind].file).with_suffix(target.suffix)
    if not target.as_posix().endswith("/" + rel.as_posix()):
        rel = Path(target.name)  # out_dir: the base name only
    home = Path(target.as_posix()[: -len(rel.as_posix())])
    folder = home / HISTORY / _kept_under(old_text, target.suffix) / rel.parent
    n = max((_run_number(p) for p in folder.glob(f"{rel.stem}.*{rel.suffix}")), default=0) + 1
    return move_new(target, folder / f"{rel.stem}.{n}{rel.suffix}")


def move_new(src: Path, dst: Path) -> Path:
    """Move ``src`` to ``dst``, which must not exist (FileExistsError, both files left as they were)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        if dst.exists():  # os.link fails on it too, even where it appeared since this check
            raise FileExistsError
        os.link(src, dst)
    except FileExistsError:
        raise FileExistsError(f"{dst} exists: not overwriting a kept document (moving {src} there refused)") from None
    except OSError:  # no hard links on this file system
        src.rename(dst)
        return dst
    src.unlink()
    return dst


def _kept_under(text: str, suffix: str) -> str:
    """The history folder of a replaced file: its document's tree (:func:`history_folder`), a text's from the
    provenance its first line names."""
    if suffix != ".json":
        tree = re.search(r", tree ([0-9a-f]{12})", text.partition("\n")[0])
        return f"tree-{tree[1]}" if tree else "tree-unknown"
    try:
        return history_folder(json.loads(text))
    except ValueError:
        return history_folder(None)


_SITE = re.compile(r"/[^\s\"':]*?/(site-packages|dist-packages)/")
_TMP = re.compile(r"/tmp/[^\s\"'/]+")


def scrub(obj: Any, replacements: dict[str, str] | None = None) -> Any:
    """``obj`` with machine paths replaced: the repository root by ``.``, ``.../site-packages/`` by
    ``<site-packages>/``, a ``/tmp/<dir>`` by ``<tmp>``, and any ``replacements`` (prefix -> label)."""
    if isinstance(obj, dict):
        return {k: scrub(v, replacements) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub(v, replacements) for v in obj]
    if not isinstance(obj, str):
        return obj
    s = obj
    for prefix, label in (replacements or {}).items():
        s = s.replace(prefix, label)
    s = s.replace(str(REPO_ROOT) + "/", "").replace(str(REPO_ROOT), ".")
    s = _SITE.sub(r"<\1>/", s)
    return _TMP.sub("<tmp>", s)


def dumps(doc: Any) -> str:
    """A document as every writer's file holds it: JSON indented by one, a newline at the end."""
    return json.dumps(doc, indent=1, default=_json_default) + "\n"


def _write(target: Path, text: str) -> Path:
    """Write ``text`` atomically (a temp file renamed over the target)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(target)
    return target


def write_json(target: Path, doc: Any) -> Path:
    """Write ``doc`` as indented JSON, atomically (a dry run's sample; documents go through :func:`save`)."""
    return _write(target, dumps(doc))


def _json_default(o: Any) -> Any:
    return dataclasses.asdict(o) if dataclasses.is_dataclass(o) else str(o)


def read_json(source: str | os.PathLike) -> Any:
    """A JSON file, or None when it is missing or not JSON."""
    try:
        return json.loads(Path(source).read_text())
    except (OSError, ValueError):
        return None


def load(kind: str, device: str | None = None, base: Path | None = None) -> dict[str, Any] | None:
    """The document of ``kind`` in ``<base>/<device>/`` (``device``: a directory name such as ``h200x2``; by
    default this machine's), ``base`` defaulting to :func:`root`; None when missing."""
    k = MEASUREMENTS[kind]
    return read_json(_home(k, base or root(), device) / k.file)


def _home(k: Any, base: Path, device: str | None) -> Path:
    """``<base>/<device>`` (this machine's by default) for a per-device measurement ``k``, else ``base``."""
    return base / (device or device_dir(None, k.gpus).name) if k.per_device else base


def load_device(device: str, base: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every per-device document of ``<base>/<device>/`` by kind (missing kinds left out)."""
    docs = {kind: load(kind, device, base) for kind, k in MEASUREMENTS.items() if k.per_device}
    return {kind: doc for kind, doc in docs.items() if doc is not None}


def devices(base: Path | None = None) -> list[str]:
    """The directories of ``base`` (default :func:`root`) that hold at least one document, sorted."""
    here = base or root()
    files = {k.file for k in MEASUREMENTS.values() if k.per_device}
    dirs = [d for d in (here.iterdir() if here.is_dir() else []) if d.is_dir()]
    return sorted(d.name for d in dirs if any((d / f).is_file() for f in files))


def machine_line(info: dict[str, Any]) -> str:
    """One line: device, PCIe link, driver, torch/CUDA, freetoken, series (a document's ``machine``,
    updated with its ``provenance``)."""
    parts = [info.get("device_name") or info.get("smi_name") or "unknown device"]
    if info.get("capability"):
        parts[-1] += f" (sm_{info['capability'].replace('.', '')})"
    gen = info.get("pcie_gen_under_load") or info.get("pcie_gen_current")
    width = info.get("pcie_width_under_load") or info.get("pcie_width_current")
    if gen:
        most = f" (max Gen{info['pcie_gen_max']} x{info.get('pcie_width_max')})" if info.get("pcie_gen_max") else ""
        parts.append(f"PCIe Gen{gen} x{width}{most}")
    labels = {"driver": "driver {}", "torch": "torch {} (CUDA " + str(info.get("torch_cuda")) + ")", "nvcc": "nvcc {}",
              "freetoken": "freetoken {}", "series_hash": "series {}"}  # fmt: skip
    parts += [label.format(info[key]) for key, label in labels.items() if info.get(key)]
    return ", ".join(parts + ([f"tree {info['tree'][:12]}"] if info.get("tree") else []))
