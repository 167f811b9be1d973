"""`zarchive view` through its HTTP endpoints, with real requests against a real server in a thread:
the token, loopback-only binding, path traversal, concurrent requests, every input kind, the pages'
content (statistics, tables, configs, metadata, audit, exports, diff), and the static page."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import forkrun
import numpy as np
import pytest
import torch
from hostile.kinds import KINDS, write_base
from viewer_helpers import get, run_archive, serving

from zarchive.inspection.stats import heat_map, tensor_stats
from zarchive.viewer import static
from zarchive.viewer.diffpage import diff_body, diff_data
from zarchive.viewer.routes import Routes
from zarchive.viewer.server import ViewerServer
from zarchive.viewer.sources import Sources

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_archive(tmp_path_factory.mktemp("viewer") / "run.zarc")


def api(server, path: str) -> tuple[int, object]:  # type: ignore[no-untyped-def]
    status, body, _ = get(server.url + path)
    return status, json.loads(body)


def node_url(path: str, page: int = 0) -> str:
    return "a/0/node?" + urllib.parse.urlencode({"path": path, "page": page})


# --- the token and the binding --------------------------------------------------------------------
def test_every_request_needs_the_token(run: Path) -> None:
    with serving(run) as (server, routes):
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert get(server.url)[0] == 200
        for path in ("/", "/a/0/", "/api/archives", f"/{routes.token[:-1]}/", f"/{routes.token}x/api/archives",
                     "/wrong/a/0/node?path=model", f"/api/{routes.token}/archives"):  # fmt: skip
            status, body, _ = get(base + path)
            assert status == 403, path
            assert "model" not in body and "layers" not in body


def test_start_in_thread_serves_until_shutdown(run: Path) -> None:
    """ViewerServer.start_in_thread (the other tests serve through viewer_helpers.start, which stops sooner)."""
    sources = Sources([str(run)])
    server = ViewerServer(Routes(sources, diff=diff_data, diff_page=diff_body))
    try:
        thread = server.start_in_thread()
        assert thread.daemon and thread.is_alive()
        assert get(server.url)[0] == 200
        server.shutdown()
        thread.join(5)
        assert not thread.is_alive()
    finally:
        server.server_close()
        sources.close()


def test_binds_the_loopback_address_only(run: Path) -> None:
    with serving(run) as (server, _):
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        assert server.url.startswith("http://127.0.0.1:")
        # another address of this machine does not answer
        others = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)} - {"127.0.0.1"}
        for addr in others:
            if addr.startswith("127."):
                continue
            with socket.socket() as s, pytest.raises(OSError):
                s.settimeout(2)
                s.connect((addr, port))


def test_the_token_is_random(run: Path) -> None:
    with serving(run) as (_, ra), serving(run) as (_, rb):
        assert ra.token != rb.token and len(ra.token) >= 24


# --- traversal --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path",
    ["a/0/../../etc/passwd", "a/0/%2e%2e/%2e%2e/etc/passwd", "a/0/node%2f..%2f..", "a/..%5c..%5cwin.ini",
     "a/0/node?path=../../etc/passwd", "a/0/node?path=model/../../x", "a/0/node?path=model/%2e%2e/x",
     "api/a/0/node?path=..", "a/0/node?path=model/./layers.0.weight", "a/0/node?path=a%00b"],
)  # fmt: skip
def test_traversal_is_refused(run: Path, path: str) -> None:
    with serving(run) as (server, _):
        status, body, _ = get(server.url + path)
        assert status == 400, (path, status)
        assert "root:" not in body


@pytest.mark.parametrize("path", ["a/0/node?path=/etc/passwd", f"a/0/node?path={ROOT}/README.md", "a/1/",
                                  "a/99999/node?path=model", "README.md", "api/a/0/nothing", "a/0/node?path=model/nope"])  # fmt: skip
def test_what_is_not_in_the_archive_is_404(run: Path, path: str) -> None:
    with serving(run) as (server, _):
        status, body, _ = get(server.url + path)
        assert status == 404, (path, status)
        assert "zarchive" not in body.split("<main>")[-1].lower() or "no " in body


# --- the pages ------------------------------------------------------------------------------------
def test_overview_tree_metadata_audit_configs(run: Path) -> None:
    with serving(run) as (server, _):
        status, page, headers = get(server.url)
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        assert headers["Referrer-Policy"] == "no-referrer"
        for text in ("layers.0.weight", "float32", "[48, 32]", "model.safetensors", "tests.viewer:TrainConfig",
                     "zstd", 'id="search"', "zarchive 1.6"):  # fmt: skip
            assert text in page, text
        assert 'value="0.01"' in page and "readonly" in page  # the config as a read-only form
        assert "&lt;b&gt;not bold&lt;/b&gt;" in page and "<b>not bold</b>" not in page
        status, tree = api(server, "api/a/0/tree")
        kinds = {n["path"]: n["kind"] for n in tree["nodes"]}  # type: ignore[index]
        assert kinds["model/layers.0.weight"] == "tensor" and kinds["metrics"] == "table"
        assert kinds["config"] == "config" and kinds["model"] == "container" and kinds["notes"] == "value"
        status, checks = api(server, "api/a/0/verify")
        assert checks == {"checked": True, "intact": True, "problems": []}
        assert "intact" in get(server.url + "a/0/verify")[1]


def test_tensor_page(run: Path) -> None:
    with serving(run) as (server, _):
        status, page, _ = get(server.url + node_url("model/view"))
        assert status == 200
        assert 'class="histogram"' in page and 'class="heatmap"' in page
        assert "/model/tied" in page and "/model/layers.0.weight" in page  # storage sharing
        status, v = api(server, "api/" + node_url("model/view"))
        s = v["stats"]  # type: ignore[index]
        assert s["strides"] == [32, 1] and s["storage_offset"] == 2 and not s["contiguous"]
        assert sum(s["histogram"]["counts"]) == 48 * 3


@pytest.mark.parametrize("path", ["model/bf", "model/half", "model/mask", "arr", "model/layers.0.bias"])
def test_every_dtype_has_statistics(run: Path, path: str) -> None:
    with serving(run) as (server, _):
        status, v = api(server, "api/" + node_url(path))
        assert status == 200
        s = v["stats"]  # type: ignore[index]
        assert s["computed"] and s["min"] is not None and sum(s["histogram"]["counts"]) == s["numel"]


def test_table_page_and_its_rows(run: Path) -> None:
    with serving(run) as (server, _):
        status, page, _ = get(server.url + node_url("metrics"))
        assert status == 200 and 'class="lineplot"' in page and 'id="next-page"' in page
        status, v = api(server, "api/" + node_url("metrics", 2))
        table, rows = v["table"], v["rows"]  # type: ignore[index]
        assert [c["nulls"] for c in table["columns"]] == [0, 1, 0]
        assert rows["page"] == 2 and rows["index"][0] == "100" and len(rows["rows"]) == 20
        assert get(server.url + "a/0/node?path=metrics&page=x")[0] == 400


def test_concurrent_requests(run: Path) -> None:
    paths = [node_url(p) for p in ("model/layers.0.weight", "model/bf", "metrics", "config", "arr", "notes")] * 6
    paths += ["", "api/a/0/tree", "api/a/0/meta", "api/a/0/audit"] * 4
    with serving(run) as (server, _), ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda p: get(server.url + p), paths))
    assert [a[0] for a in answers] == [200] * len(paths)
    by_path: dict[str, str] = {}
    for p, a in zip(paths, answers):
        assert by_path.setdefault(p, a[1]) == a[1]  # the same answer every time


@pytest.mark.parametrize("kind", KINDS)
def test_every_input_kind(tmp_path: Path, kind: str) -> None:
    path = write_base(kind, tmp_path / kind)
    with serving(path) as (server, _):
        status, tree = api(server, "api/a/0/tree")
        assert status == 200
        nodes = tree["nodes"]  # type: ignore[index]
        tensors = [n["path"] for n in nodes if n["kind"] == "tensor"]
        assert tensors, nodes
        assert get(server.url)[0] == 200
        status, checks = api(server, "api/a/0/verify")
        assert status == 200 and checks["intact"], checks  # type: ignore[index]
        for p in tensors:
            status, v = api(server, "api/" + node_url(p))
            assert status == 200 and v["stats"]["computed"], (p, v)  # type: ignore[index]
        if kind == "exports":
            page = get(server.url)[1]
            assert "opset" in page and "17" in page and "batch" in page


def test_a_configured_model_and_a_store_version(tmp_path: Path) -> None:
    from hostile.kinds import write_store

    store = write_store(tmp_path / "models")
    for given in (str(store), f"{store}@1.0.0", f"{store}@latest"):
        with serving(given) as (server, routes):
            assert routes.labels == ["models@1.0.0"]
            status, tree = api(server, "api/a/0/tree")
            kinds = {n["path"]: n["kind"] for n in tree["nodes"]}  # type: ignore[index]
            assert kinds[""] == "container" and kinds["config"] == "config", kinds
            page = get(server.url)[1]
            assert 'name="width"' in page and "hostile.models:WideConfig" in page
    with serving(f"{store}@9.9.9") as (server, _):
        status, page, _ = get(server.url)
        assert status == 404 and "no version 9.9.9" in page


def test_two_archives_and_the_diff_page(tmp_path: Path) -> None:
    a, b = run_archive(tmp_path / "a.zarc"), run_archive(tmp_path / "b.zarc", seed=1, scale=0.05)
    with serving(a, b) as (server, _):
        status, page, _ = get(server.url)
        assert status == 200 and "a.zarc" in page and "b.zarc" in page
        status, page, _ = get(server.url + "diff")
        assert status == 200 and 'class="barchart"' in page and "layers.3.weight" in page
        status, d = api(server, "api/diff")
        changed = {t["path"] for t in d["tensors"] if t["status"] == "changed"}  # type: ignore[index]
        assert "model/layers.0.weight" in changed and d["changed"]  # type: ignore[index]
        assert get(server.url + "a/1/")[0] == 200
    with serving(a) as (server, _):
        assert get(server.url + "diff")[0] == 404


def test_a_value_over_the_read_budget_is_an_error_page(tmp_path: Path) -> None:
    import zarchive
    from zarchive.viewer.routes import Routes

    small = tmp_path / "small.zarc"
    zarchive.save({"big": np.zeros(300_000, dtype=np.float64), "x": 1}, small, compress=False)
    sources = Sources([str(small)], max_read_bytes=1_000_000, mmap=False)
    routes = Routes(sources)
    try:
        status, _, body = routes.handle(f"/{routes.token}/a/0/node?path=big")
        assert status == 422 and b"max_read_bytes" in body
        assert routes.handle(f"/{routes.token}/a/0/node?path=x")[0] == 200  # the viewer goes on
    finally:
        sources.close()


# --- the statistics ---------------------------------------------------------------------------------
def test_statistics_are_exact_and_chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    from zarchive.inspection import stats

    monkeypatch.setattr(stats, "BLOCK", 7)  # many blocks
    x = torch.tensor([[1.0, float("nan"), float("inf")], [0.0, -2.0, float("-inf")], [3.0, 0.0, 5.0]])
    s = tensor_stats(x)
    finite = np.array([1.0, 0.0, -2.0, 3.0, 0.0, 5.0])
    assert (s.nan, s.posinf, s.neginf, s.zeros) == (1, 1, 1, 2)
    assert (
        s.min == -2.0
        and s.max == 5.0
        and s.mean == pytest.approx(finite.mean())
        and s.std == pytest.approx(finite.std())
    )
    assert s.histogram is not None and sum(s.histogram.counts) == 6
    big = np.random.default_rng(0).standard_normal((50, 9))
    s = tensor_stats(big)
    assert s.mean == pytest.approx(big.mean()) and s.std == pytest.approx(big.std())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.int8, torch.uint8])
def test_narrow_dtypes_give_the_statistics_of_their_exact_values(dtype: torch.dtype) -> None:
    x = (torch.randn(64, 48, generator=torch.Generator().manual_seed(1)) * 20).to(dtype)
    if dtype.is_floating_point and dtype != torch.float8_e4m3fn:
        x[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
    view = x[:, ::3]  # not contiguous
    for v in (x, view):
        s = tensor_stats(v)
        d = v.double()
        finite = d[torch.isfinite(d)]
        assert s.dtype == str(dtype).removeprefix("torch.")
        assert (s.nan, s.zeros) == (int(d.isnan().sum()), int((d == 0).sum()))
        assert s.min == finite.min().item() and s.max == finite.max().item()
        assert s.mean == pytest.approx(finite.mean().item()) and s.std == pytest.approx(
            finite.std(unbiased=False).item()
        )


@pytest.mark.parametrize("name", ["bits8", "uint4", "int4", "float4_e2m1fn_x2", "complex32"])
def test_dtypes_without_arithmetic_are_described_not_summarised(name: str) -> None:
    dtype = getattr(torch, name, None)
    if dtype is None:
        pytest.skip(f"torch {torch.__version__} has no {name}")
    size = torch.empty(0, dtype=dtype).element_size()
    x = torch.zeros(4, 4, dtype={1: torch.uint8, 2: torch.int16, 4: torch.int32}[size]).view(dtype)
    s = tensor_stats(x)
    assert not s.computed and "no statistics" in s.note and s.shape == [4, 4]
    assert heat_map(x) is None


def test_a_broadcast_view_costs_its_storage() -> None:
    x = torch.tensor([1.0, 2.0]).as_strided((20000, 16384), (0, 0))
    t0 = time.perf_counter()
    s = tensor_stats(x)
    assert time.perf_counter() - t0 < 5
    assert s.numel == 20000 * 16384 and s.mean == 1.0 and "broadcast" in s.note
    overlapping = torch.arange(10.0).as_strided((4, 4), (1, 1))
    assert not tensor_stats(overlapping).computed
    h = heat_map(x)
    assert h is not None and len(h.values) <= 64 and len(h.values[0]) <= 64


# --- the static page --------------------------------------------------------------------------------
EXTERNAL = re.compile(r"(https?:)?//|<script[^>]*\bsrc\s*=|<link[^>]*\bhref\s*=|\burl\(|@import", re.IGNORECASE)


def test_static_page_is_self_contained(tmp_path: Path) -> None:
    a, b = run_archive(tmp_path / "a.zarc"), run_archive(tmp_path / "b.zarc", seed=1, scale=0.05)
    out = tmp_path / "report.html"
    done = forkrun.cli("view", "--html", out, a, b, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert not EXTERNAL.search(page), EXTERNAL.search(page)
    for href in re.findall(r'\b(?:href|src)="([^"]*)"', page):
        assert href.startswith("#"), href
    for text in ('class="histogram"', 'class="heatmap"', 'class="lineplot"', 'class="barchart"', 'id="diff"',
                 "layers.0.weight", "intact"):  # fmt: skip
        assert text in page, text
    anchors = set(re.findall(r'\bid="([^"]+)"', page))
    assert {h[1:] for h in re.findall(r'href="(#[^"]+)"', page)} <= anchors


def test_static_page_of_one_archive_in_python(run: Path) -> None:
    sources = Sources([str(run)])
    try:
        page = static.render(sources, diff=diff_data, diff_page=diff_body)
    finally:
        sources.close()
    assert 'id="diff"' not in page and 'class="histogram"' in page and not EXTERNAL.search(page)


# --- the command line -------------------------------------------------------------------------------
def test_cli_serves_prints_the_url_and_stops_on_ctrl_c(run: Path) -> None:
    import signal

    proc = subprocess.Popen([sys.executable, "-m", "zarchive", "view", "--no-browser", str(run)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/\S+/", line)
        assert url, line
        assert get(url.group(0))[0] == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.zarc"
    bad.write_bytes(b"not an archive")
    for args in (["view", str(tmp_path / "missing.zarc")], ["view", "--html", str(tmp_path / "o.html"), str(bad)]):
        done = subprocess.run(
            [sys.executable, "-m", "zarchive", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2 and done.stderr.startswith("zarchive view: error:"), done.stderr
        assert not (tmp_path / "o.html").exists()
