"""The JavaScript reader (js/src, no Node API) in a real browser: Debian's headless `chromium`, driven
by selenium through `chromedriver`, loads `js/src/index.js` as an ES module (fzstd through an import
map), fetches every golden example and prints its class-free neutral form, which must equal the
committed `<name>.generic.json`. Skips with a reason where selenium, chromium, chromedriver or
js/node_modules is missing.
"""

from __future__ import annotations

import http.server
import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "spec" / "examples"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.skipif(
        not (CHROMIUM and DRIVER), reason="needs chromium and chromedriver (apt-get install chromium chromium-driver)"
    ),
    pytest.mark.skipif(
        not (ROOT / "js" / "node_modules" / "fzstd").is_dir(),
        reason="js/node_modules is missing: run `npm ci --prefix js`",
    ),
]

PAGE = """<!doctype html>
<script type="importmap">{"imports": {"fzstd": "/js/node_modules/fzstd/esm/index.mjs"}}</script>
<script type="module">
import { neutralText } from "/js/src/index.js";
const out = {};
try {
  for (const name of NAMES) {
    const bytes = new Uint8Array(await (await fetch("/spec/examples/" + name)).arrayBuffer());
    out[name] = neutralText(bytes);
  }
  window.__result = JSON.stringify(out);
} catch (e) {
  window.__result = JSON.stringify({"error": String(e && e.stack || e)});
}
</script>
"""


class Handler(http.server.SimpleHTTPRequestHandler):
    page = b""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, directory=str(ROOT), **kwargs)  # type: ignore[arg-type]

    def do_GET(self) -> None:
        if self.path != "/__js_reader__.html":
            super().do_GET()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(self.page)))
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    names = sorted(p.name for p in EXAMPLES.glob("*.zarc"))
    Handler.page = PAGE.replace("NAMES", json.dumps(names)).encode()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/__js_reader__.html"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_reader_runs_in_a_browser(server: str) -> None:
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=options)
    try:
        driver.set_page_load_timeout(120)
        driver.get(server)
        deadline = time.monotonic() + 180
        result = None
        while result is None and time.monotonic() < deadline:
            result = driver.execute_script("return window.__result || null")
            time.sleep(0.2)
    finally:
        driver.quit()
    assert result is not None, "the page did not finish"
    forms = json.loads(result)
    assert "error" not in forms, forms.get("error")
    assert len(forms) >= 39
    for name, text in forms.items():
        expected = EXAMPLES / f"{name.split('.')[0]}.generic.json"
        assert text == expected.read_text(encoding="utf-8"), name
