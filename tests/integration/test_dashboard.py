"""`dpsense dashboard` in a real browser against a running analyst (real Mosquitto, headless Chromium).

A fleet of 3 simulated devices publishes 3000 readings (one withheld, so device 2 has a gap;
one malformed message, so there is a dead letter); the analyst closes one count window of
2000. The page must show each device with the store's reading count, and the latest
window's candidate count as stored; /metrics must parse and carry the store's counters.
A second test drives the window and column pickers over a small store written directly.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dpsense.cloud import topics
from dpsense.cloud.broker import Broker, free_port
from dpsense.cloud.config import Settings
from dpsense.cloud.dashboard.data import MAX_POINTS, StoreSource
from dpsense.cloud.dashboard.server import DashboardServer
from dpsense.cloud.datasets import paper1_synthetic
from dpsense.cloud.profile import calibrate
from dpsense.cloud.simulate import Encoded, FleetPublisher, encode_fleet
from dpsense.cloud.storage import Reading, open_analyst_store
from tests.integration.procs import stop

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DEVICES, N, WINDOW = 3, 3000, 2000
WITHHELD = 3 * 5 + 1            # row of device 2's seq 5: never published, so one gap



def _service(args: list[str], log: Path, password: str = "") -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), DPSENSE_BROKER_PASSWORD=password)
    with open(log, "wb") as f:
        return subprocess.Popen([sys.executable, "-m", "dpsense.cloud.cli", *args], env=env,
                                stdout=f, stderr=subprocess.STDOUT)


def _wait(what: str, pred: Callable[[], Any], timeout: float, log: Path | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("%s within %.0f s%s" % (what, timeout, " (log: %s)" % log if log else ""))
        time.sleep(0.2)


def _in_log(log: Path, text: bytes) -> bool:
    return log.exists() and text in log.read_bytes()


def _withhold(enc: Encoded, i: int) -> Encoded:
    return Encoded(np.delete(enc.device_ids, i), np.delete(enc.seqs, i), enc.readings[:i] + enc.readings[i + 1:],
                   enc.corrections[:i] + enc.corrections[i + 1:], np.delete(enc.raw_q, i, axis=0),
                   np.delete(enc.released_q, i, axis=0))


def _browser() -> Any:
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip("Debian packages 'chromium' and 'chromium-driver' are not installed (scripts/setup.sh does)")
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1280,2000"):
        opts.add_argument(a)
    try:
        # An explicit driver path: Selenium Manager would try to download one, and there is no network.
        return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    except WebDriverException as e:
        pytest.skip("headless chromium cannot start here: %s" % str(e).splitlines()[0])


def _store_with_two_windows(url: str, columns: int) -> None:
    """40 readings of ``columns`` columns from 2 devices; windows 0 (rows 1..20) and 1 (rows 21..40)."""
    now = time.time()
    with open_analyst_store(url) as s:
        s.add_batch([Reading(i % 2 + 1, 1, i // 2, i.to_bytes(8, "little"), 1,
                             tuple(100 * i * (c + 1) for c in range(columns)), "dpsense/readings/d%d" % (i % 2 + 1),
                             now) for i in range(40)], [])
        for w, cand in ((0, [3, 4, 5]), (1, [30])):
            first = 20 * w + 1
            s.save_window_result(w, {"window": w, "first_row": first, "last_row": first + 19, "n": 20,
                                     "presumed": len(cand), "fp": 0, "fn": 0, "candidates": len(cand),
                                     "missing_corrections": 0, "split_accepted": True, "presumed_rows": cand,
                                     "candidate_rows": cand, "round_s": 0.5})


@pytest.mark.parametrize("columns", [3, 1])
def test_choosing_a_window_and_columns_in_a_browser(tmp_path: Path, columns: int) -> None:
    """The plot follows the latest window until another is picked; columns are chosen when there
    are more than two, and a one-column window is plotted against arrival order."""
    url = "sqlite:///%s" % (tmp_path / "analyst.db")
    _store_with_two_windows(url, columns)
    server = DashboardServer(("127.0.0.1", 0), StoreSource(lambda: open_analyst_store(url)), store_label=url,
                             refresh_s=0.5)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    driver = _browser()
    try:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select
        driver.get(server.url)
        title = lambda: driver.find_element(By.ID, "plot-title").text  # noqa: E731
        _wait("the latest window plotted", lambda: title().startswith("Window 1: 1 candidate among 20 readings"), 20)
        driver.find_element(By.CSS_SELECTOR, "#windows tbody tr[data-window='0']").click()
        _wait("window 0 plotted", lambda: title().startswith("Window 0: 3 candidates"), 20)
        assert len(driver.find_elements(By.CSS_SELECTOR, "#plot circle.pt-presumed")) == 3
        assert Select(driver.find_element(By.ID, "window-pick")).first_selected_option.text == "window 0"
        time.sleep(1.0)                 # two refreshes: the choice must survive them
        assert title().startswith("Window 0")
        if columns == 3:
            Select(driver.find_element(By.ID, "y-col")).select_by_visible_text("column 3")
            _wait("column 3 on the y axis", lambda: driver.find_element(By.ID, "y-label").text ==
                  "column 3, perturbed value (quanta)", 10)
        else:
            assert not driver.find_element(By.ID, "columns").is_displayed()
            assert driver.find_element(By.ID, "x-label").text == "reading in the window (arrival order)"
            assert driver.find_element(By.ID, "y-label").text == "column 1, perturbed value (quanta)"
        Select(driver.find_element(By.ID, "window-pick")).select_by_value("latest")
        _wait("back to the latest window", lambda: title().startswith("Window 1"), 10)
        assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
    finally:
        driver.quit()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.skipif(shutil.which("mosquitto_passwd") is None, reason="Debian package 'mosquitto' is not installed")
def test_dashboard_in_a_browser(tmp_path: Path) -> None:
    data_dir, logs = tmp_path / "data", tmp_path / "logs"
    data_dir.mkdir()
    logs.mkdir()
    x = paper1_synthetic(N, 400, "scale", seed=3).x
    # Epsilon 4 per column: the outliers stand apart in the window, so the screenshot shows every kind of point.
    profile = calibrate(paper1_synthetic(N, 400, "scale", seed=1003).x, "4", 0.01)
    (data_dir / "profile.json").write_text(profile.to_json())
    settings = Settings(data_dir=data_dir, broker_port=free_port())
    common = ["--data-dir", str(data_dir), "--broker-port", str(settings.broker_port)]
    broker = Broker(data_dir, port=settings.broker_port)
    passwords = {role: broker.add_account(role) for role in ("analyst", "correction")}
    device_pws = broker.add_devices(list(range(1, DEVICES + 1)))
    procs: list[subprocess.Popen[bytes]] = []
    driver = None
    with broker.running():
        try:
            procs.append(_service(["correction-server", *common], logs / "cs.log", passwords["correction"]))
            procs.append(_service(["analyst", *common, "--window", str(WINDOW)], logs / "analyst.log",
                                  passwords["analyst"]))
            for name in ("cs.log", "analyst.log"):
                _wait("%s subscribed" % name, lambda n=name: _in_log(logs / n, b"ingest: subscribed"), 30, logs / name)

            enc = _withhold(encode_fleet(x, profile, DEVICES, seed=3), WITHHELD)
            pub = FleetPublisher(settings, device_pws, DEVICES)
            pub.connect()
            try:
                pub.publish(enc, timeout=120)
                bad = pub.clients[0].publish(topics.READINGS % "d1", b"\x01not a record", qos=1)
                bad.wait_for_publish(30)
            finally:
                pub.close()

            url = settings.analyst_db

            def window_done() -> bool:
                with open_analyst_store(url) as s:
                    return s.count() == N - 1 and s.dead_letter_count() == 1 and len(s.window_results()) == 1
            _wait("all readings stored and window 0 closed", window_done, 120, logs / "analyst.log")
            with open_analyst_store(url) as s:
                per_device: Counter[int] = Counter()
                for g in s.gaps():
                    per_device[g.device_id] += g.received
                missing = sum(g.missing for g in s.gaps())
                (window, result), = s.window_results()
                stored, dead = s.count(), s.dead_letter_count()
            assert missing == 1 and dict(per_device) == {1: 1000, 2: 999, 3: 1000}

            procs.append(_service(["dashboard", "--data-dir", str(data_dir), "--port", "0", "--refresh", "1"],
                                  logs / "dashboard.log"))
            line = _wait("the dashboard's address", lambda: re.search(rb"dashboard: (http://127\.0\.0\.1:\d+/)",
                                                                        (logs / "dashboard.log").read_bytes()),
                         30, logs / "dashboard.log")
            base = line.group(1).decode()

            driver = _browser()
            driver.get(base)
            from selenium.webdriver.common.by import By

            def device_rows() -> list[tuple[str, str]] | None:
                rows = [(r.find_element(By.CSS_SELECTOR, "td[data-col=device]").text,
                         r.find_element(By.CSS_SELECTOR, "td[data-col=readings]").text)
                        for r in driver.find_elements(By.CSS_SELECTOR, "#devices tbody tr")
                        if r.find_elements(By.CSS_SELECTOR, "td[data-col=device]")]
                return rows if len(rows) == DEVICES else None
            rows = _wait("the per-device table to fill", device_rows, 30, logs / "dashboard.log")
            assert [(int(d), int(n.replace(",", ""))) for d, n in rows] == sorted(per_device.items())

            def latest_candidates() -> str | None:
                cells = driver.find_elements(By.CSS_SELECTOR, "#windows tbody tr:first-child td[data-col=candidates]")
                return cells[0].text if cells else None
            assert int(_wait("the windows table", latest_candidates, 30).replace(",", "")) == result["candidates"]
            first_window = driver.find_element(By.CSS_SELECTOR, "#windows tbody tr:first-child td[data-col=window]")
            assert int(first_window.text) == window == 0

            title = _wait("the plot", lambda: driver.find_element(By.ID, "plot-title").get_attribute("data-candidates"),
                          30)
            assert int(title) == result["candidates"]
            dots = driver.find_elements(By.CSS_SELECTOR, "#plot circle.pt-presumed, #plot circle.pt-added")
            assert len(dots) == min(result["candidates"], MAX_POINTS)
            assert driver.find_element(By.ID, "x-label").text == "column 1, perturbed value (quanta)"
            assert driver.find_element(By.ID, "y-label").text == "column 2, perturbed value (quanta)"
            assert driver.find_element(By.CSS_SELECTOR, "#t-dead .v").text == str(dead)
            assert driver.find_element(By.CSS_SELECTOR, "#t-ingested .v").text == "not recorded"
            # A script error or a Content-Security-Policy violation shows up here.
            assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
            out = ROOT / "out" / "dashboard"
            out.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(out / "dashboard.png"))

            with urllib.request.urlopen(base + "metrics", timeout=10) as r:
                text = r.read().decode()
            value = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
            assert value["dpsense_readings_stored_total"] == stored == N - 1
            assert value["dpsense_dead_letters_total"] == dead == 1
            assert value["dpsense_sequence_numbers_missing"] == missing
            assert value["dpsense_windows_closed_total"] == 1
            assert value["dpsense_round_latency_seconds_count"] == 1
            assert value["dpsense_round_latency_seconds_sum"] == pytest.approx(result["round_s"])
        finally:
            if driver is not None:
                driver.quit()
            for p in reversed(procs):
                stop(p)
