"""`dpsense dashboard` in a real browser against a running analyst (real Mosquitto, headless Chromium).

A fleet of 3 simulated devices in two groups (device 3 in hall-a) publishes a boot status
message each, with its ledger's figures, and 3000 readings (one withheld, so device 2 has a
gap; one malformed message, so there is a dead letter); the analyst closes count windows of
900 per group (three, each with its correction round). The page must show each device as
``results.devices`` has it, privacy columns included, and the latest window's candidate count
as stored; /metrics must parse and equal ``results.metrics``. A second test drives the window
and column pickers over a small store written directly. Every wait polls a condition with a
generous deadline: nothing here sleeps for a fixed time.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dpsense.cloud.ops import results

from dpsense.cloud.transport import topics
from dpsense.cloud.deploy.broker import Broker, free_port
from dpsense.cloud.deploy.config import Settings
from dpsense.cloud.ops.dashboard.data import MAX_POINTS, StoreSource
from dpsense.cloud.ops.dashboard.server import DashboardServer
from dpsense.cloud.sim.datasets import paper1_synthetic
from dpsense.cloud.sim.calibration import calibrate
from dpsense.cloud.correction.sealed import provision_keys
from dpsense.cloud.sim.simulate import Encoded, FleetEncoder, FleetPublisher
from dpsense.cloud.storage import Reading, Verdict, open_analyst_store
from dpsense.cloud.storage.records import WindowOutcome
from tests.integration.procs import stop

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DEVICES, N, WINDOW = 3, 3000, 900
WITHHELD = 3 * 5 + 1            # row of device 2's seq 5: never published, so one gap
GROUPS = {1: "default", 2: "default", 3: "hall-a"}
# Windows of 900: the default group (devices 1, 2: 1999 readings) closes two, hall-a (1000) one.
DONE_WINDOWS = 3
LEDGER = {"window": 4, "spent": "37/2", "cap": "100"}     # what each board's ledger reports



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
    """40 readings of ``columns`` columns from 2 devices; windows 0 (rows 1..20) and 1 (rows 21..40),
    done with the presumed outliers kept: rows 3, 4, 5 and row 30."""
    now = time.time()
    with open_analyst_store(url) as s:
        s.add_batch([Reading(i % 2 + 1, 1, i // 2, i.to_bytes(8, "little"), 1,
                             tuple(100 * i * (c + 1) for c in range(columns)), "dpsense/readings/d%d" % (i % 2 + 1),
                             now) for i in range(40)], [])
        for upto, cand in ((20, [3, 4, 5]), (40, [30])):
            w = s.close_window("default", "count", upto_row=upto, closed_at=now)
            assert w is not None and w.n == 20
            s.complete_window(w.id, WindowOutcome(len(cand), 0, 0, len(cand), 0, 0.01, 0.5, now),
                              [Verdict(w.id, w.group, r, (r - 1) % 2 + 1, 1, (r - 1) // 2, now, True, False, False,
                                       True) for r in cand], {})


def _ticks(driver: Any) -> int:
    """The page's completed refreshes."""
    return int(driver.execute_script("return Number(document.body.dataset.ticks || 0);"))


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
        _wait("the latest window plotted", lambda: title().startswith(
            "Window 1 (group default, its window #1): 1 candidate among 20 readings"), 60)
        driver.find_element(By.CSS_SELECTOR, "#windows tbody tr[data-window='0']").click()
        _wait("window 0 plotted", lambda: title().startswith("Window 0 (group default, its window #0): 3 candidates"),
              60)
        assert len(driver.find_elements(By.CSS_SELECTOR, "#plot circle.pt-presumed")) == 3
        assert Select(driver.find_element(By.ID, "window-pick")).first_selected_option.text == \
            "window 0 (default #0)"
        seen = _ticks(driver)
        _wait("two more refreshes", lambda: _ticks(driver) >= seen + 2, 60)     # the choice must survive them
        assert title().startswith("Window 0")
        if columns == 3:
            Select(driver.find_element(By.ID, "y-col")).select_by_visible_text("column 3")
            _wait("column 3 on the y axis", lambda: driver.find_element(By.ID, "y-label").text ==
                  "column 3, perturbed value (quanta)", 60)
        else:
            assert not driver.find_element(By.ID, "columns").is_displayed()
            assert driver.find_element(By.ID, "x-label").text == "reading in the window (arrival order)"
            assert driver.find_element(By.ID, "y-label").text == "column 1, perturbed value (quanta)"
        Select(driver.find_element(By.ID, "window-pick")).select_by_value("latest")
        _wait("back to the latest window", lambda: title().startswith("Window 1"), 60)
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
    # The broker keeps no password: each service gets its own in its environment.
    passwords = {role: broker.add_account(role) for role in ("analyst", "correction")}
    device_pws = broker.add_devices(list(range(1, DEVICES + 1)))
    url = settings.analyst_db
    with open_analyst_store(url) as s:          # what `dpsense broker add-device 3 --group hall-a` keeps
        for d, g in GROUPS.items():
            if g != "default":
                s.set_device_group(d, g, time.time())
    procs: list[subprocess.Popen[bytes]] = []
    driver = None
    with broker.running():
        try:
            procs.append(_service(["correction-server", *common], logs / "cs.log", passwords["correction"]))
            procs.append(_service(["analyst", *common, "--window", str(WINDOW)], logs / "analyst.log",
                                  passwords["analyst"]))
            for name, topic in (("cs.log", b"dpsense/corrections"), ("analyst.log", b"dpsense/readings/+"),
                                ("analyst.log", b"dpsense/status/+")):
                _wait("%s subscribed to %s" % (name, topic.decode()),
                      lambda n=name, t=topic: _in_log(logs / n, b"subscribed to " + t), 60, logs / name)

            fleet = FleetEncoder(profile, DEVICES, seed=3,
                                 keys=provision_keys(settings.data_dir, list(range(1, DEVICES + 1))))
            enc = _withhold(fleet.encode(x), WITHHELD)
            pub = FleetPublisher(settings, device_pws, DEVICES)
            pub.connect()
            try:
                # A board's boot status carries its ledger's figures (firmware/app.py).
                pub.send([(d, topics.STATUS % topics.device_username(d),
                           json.dumps(dict(json.loads(fleet.status(d)), **LEDGER)).encode())
                          for d in range(1, DEVICES + 1)])
                pub.publish(enc, timeout=300, wait="broker")
                pub.send([(1, topics.READINGS % "d1", b"\x01not a record")])
                _wait("the bad record acknowledged", lambda: pub.acked >= 2 * len(enc.readings) + DEVICES + 1,
                      30, logs / "analyst.log")
            finally:
                pub.close()

            def settled() -> bool:
                with open_analyst_store(url) as s:
                    counts = s.window_counts()
                    return (s.count() == N - 1 and s.dead_letter_count() == 1 and counts["done"] == DONE_WINDOWS
                            and counts["closed"] + counts["held"] == 0
                            and all(d.status_at is not None for d in results.devices(s)))
            _wait("all readings and statuses stored and %d windows done" % DONE_WINDOWS, settled, 300,
                  logs / "analyst.log")
            with open_analyst_store(url) as s:
                devices = results.devices(s)
                latest = results.windows(s, states=("done",), limit=1)[0]
                latest_candidates = results.candidates(s, window=latest.id)
                metrics = results.metrics(s)
            assert metrics.gaps == 1 and [(d.device_id, d.group, d.readings) for d in devices] == [
                (1, "default", 1000), (2, "default", 999), (3, "hall-a", 1000)]
            assert latest.candidates == len(latest_candidates)

            procs.append(_service(["dashboard", "--data-dir", str(data_dir), "--port", "0", "--refresh", "1"],
                                  logs / "dashboard.log"))
            line = _wait("the dashboard's address", lambda: re.search(rb"dashboard: (http://127\.0\.0\.1:\d+/)",
                                                                        (logs / "dashboard.log").read_bytes()),
                         60, logs / "dashboard.log")
            base = line.group(1).decode()

            driver = _browser()
            driver.get(base)
            from selenium.webdriver.common.by import By
            columns = ("device", "group", "readings", "candidates", "eps_window", "eps_total", "cap",
                       "eps_record_worst", "entropy")

            def device_rows() -> list[dict[str, str]] | None:
                # One script reads the whole table: the page re-renders it on every refresh, so
                # element by element a read can straddle two renderings (a stale element).
                rows: list[dict[str, str]] = driver.execute_script(
                    "return Array.from(document.querySelectorAll('#devices tbody tr'))"
                    ".filter(r => r.querySelector('td[data-col=device]'))"
                    ".map(r => Object.fromEntries(arguments[0].map("
                    "c => [c, r.querySelector('td[data-col=' + c + ']').innerText])))", list(columns))
                return rows if len(rows) == DEVICES else None
            rows = _wait("the per-device table to fill", device_rows, 60, logs / "dashboard.log")
            for row, d in zip(rows, devices, strict=True):
                assert (int(row["device"]), row["group"], int(row["readings"].replace(",", "")),
                        int(row["candidates"].replace(",", "")), row["entropy"]) == (
                    d.device_id, d.group, d.readings, d.candidates, d.entropy), row
                # The privacy columns: the page rounds to 4 significant digits.
                for col, want in (("eps_window", d.eps_window), ("eps_total", d.eps_total), ("cap", d.cap),
                                  ("eps_record_worst", d.eps_record_worst)):
                    assert want is not None and float(row[col]) == pytest.approx(float(want), rel=1e-3), (col, row)
            assert float(rows[0]["eps_window"]) == 18.5 and float(rows[0]["cap"]) == 100

            def latest_done() -> tuple[str, str, str] | None:
                cells = driver.find_elements(By.CSS_SELECTOR, "#windows tbody tr[data-state=done]")
                if not cells:
                    return None
                w, g, c = (cells[0].find_element(By.CSS_SELECTOR, "td[data-col=%s]" % col).text
                           for col in ("window", "group", "candidates"))
                return w, g, c
            window, group, candidates = _wait("the windows table", latest_done, 60)
            assert (int(window), group, int(candidates.replace(",", ""))) == (
                latest.id, latest.group, len(latest_candidates))

            title = _wait("the plot", lambda: driver.find_element(By.ID, "plot-title").get_attribute("data-candidates"),
                          60)
            assert int(title) == len(latest_candidates)
            assert driver.find_element(By.ID, "plot-title").text.startswith(
                "Window %d (group %s, its window #%d)" % (latest.id, latest.group, latest.seq))
            dots = driver.find_elements(By.CSS_SELECTOR, "#plot circle.pt-presumed, #plot circle.pt-added")
            assert len(dots) == min(len(latest_candidates), MAX_POINTS)
            assert driver.find_element(By.ID, "x-label").text == "column 1, perturbed value (quanta)"
            assert driver.find_element(By.ID, "y-label").text == "column 2, perturbed value (quanta)"
            for tile, want in (("t-dead", metrics.dead_letters), ("t-ingested", metrics.ingested),
                               ("t-duplicates", metrics.duplicates), ("t-windows", metrics.windows_closed),
                               ("t-failed", metrics.rounds_failed), ("t-gaps", metrics.gaps)):
                assert driver.find_element(By.CSS_SELECTOR, "#%s .v" % tile).text.replace(",", "") == str(want), tile
            # Each group's mean per window with its band: the page draws what /api/aggregates says,
            # and that is dpsense aggregate's estimate over the same windows.
            bands = _wait("the means per group",
                          lambda: int(driver.find_element(By.ID, "agg-note").get_attribute("data-bands") or 0), 60)
            with urllib.request.urlopen(base + "api/aggregates?column=0", timeout=30) as r:
                agg = json.loads(r.read())["aggregates"]
            assert bands == sum(len(v) for v in agg["groups"].values()) > 0
            assert sorted(agg["groups"]) == sorted(set(GROUPS.values()))
            assert len(driver.find_elements(By.CSS_SELECTOR, "#agg polygon.band")) == len(agg["groups"])
            from dpsense.cloud.privacy.stream_aggregates import Stat, aggregate
            with open_analyst_store(url) as s:
                for g, bs in agg["groups"].items():
                    want = aggregate(s, profile, group=g, window_s=agg["window_s"], since=bs[0]["start"],
                                     until=bs[-1]["end"], column=0, stat=Stat("mean"))
                    assert [(w.n, w.rows[0].lo, w.rows[0].hi) for w in want] == [(b["n"], b["lo"], b["hi"]) for b in bs]
            assert "spends no privacy budget" in driver.find_element(By.ID, "agg-note").text
            # The first group's latest window as a histogram: released counts and estimates per bin.
            bins = _wait("the histogram", lambda: int(driver.find_element(By.ID, "hist-title").get_attribute("data-bins")
                                                      or 0), 60)
            first = sorted(agg["groups"])[0]
            with urllib.request.urlopen(base + "api/histogram?column=0&group=" + first, timeout=30) as r:
                hist = json.loads(r.read())["histogram"]
            assert bins == len(hist["labels"]) == 12 and sum(hist["released"]) == hist["n"] > 0
            assert len(driver.find_elements(By.CSS_SELECTOR, "#hist rect.released")) == bins
            assert len(driver.find_elements(By.CSS_SELECTOR, "#hist circle.estimate")) == bins
            # A script error or a Content-Security-Policy violation shows up here.
            assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
            out = ROOT / "out" / "dashboard"
            out.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(out / "dashboard.png"))

            with urllib.request.urlopen(base + "metrics", timeout=30) as r:
                text = r.read().decode()
            value = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
            for name, want in (("dpsense_readings_ingested_total", metrics.ingested),
                               ("dpsense_readings_stored_total", metrics.stored),
                               ("dpsense_readings_duplicates_total", metrics.duplicates),
                               ("dpsense_dead_letters_total", metrics.dead_letters),
                               ("dpsense_sequence_numbers_missing", metrics.gaps),
                               ("dpsense_windows_closed_total", metrics.windows_closed),
                               ("dpsense_rounds_failed_total", metrics.rounds_failed),
                               ("dpsense_round_latency_seconds_count", metrics.rounds_completed)):
                assert value[name] == want, name
            assert value["dpsense_round_latency_seconds_sum"] == pytest.approx(metrics.round_seconds_total)
            assert (value["dpsense_readings_stored_total"], value["dpsense_dead_letters_total"]) == (N - 1, 1)
            assert value["dpsense_round_latency_seconds_count"] == DONE_WINDOWS
            means = {(s.labels["group"], s.labels["column"]): s.value for f in text_string_to_metric_families(text)
                     for s in f.samples if s.name == "dpsense_group_mean"}
            assert {c for _, c in means} == {"0", "1"} and {g for g, _ in means} == set(GROUPS.values())
        finally:
            if driver is not None:
                driver.quit()
            for p in reversed(procs):
                stop(p)
