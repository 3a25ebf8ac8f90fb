"""A live dashboard for the browser tests: the app on a tiny model in this process, the records
its engine produced, and the page's own controls (preset, Fire, presenter pause / step)."""
from __future__ import annotations

import json
import re
import threading
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field

from chromium import ROOT, debug, wait_for
from truth import shows

import app as dashboard

from support.server import BackgroundServer

PRESETS = json.loads((ROOT / "assets" / "presets.json").read_text(encoding="utf-8"))["presets"]


@dataclass
class Live:
    url: str
    llm: object
    records: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def last_record(self) -> dict | None:
        with self.lock:
            return self.records[-1] if self.records else None

    def metrics(self) -> dict[str, float]:
        text = urllib.request.urlopen(self.url + "/metrics", timeout=10).read().decode()
        pattern = re.compile(r"^(batchscope_\w+) ([0-9.e+-]+)$", re.MULTILINE)
        return {m[1]: float(m[2]) for m in pattern.finditer(text)}


@contextmanager
def live_dashboard(model_dir: str, wrap=lambda app: app, options=("--num-kv-blocks", "256")):
    """The dashboard on ``model_dir`` served (``wrap``ped, e.g. by a test proxy) until exit;
    ``options``: app.py's flags (e.g. a small KV pool)."""
    args = dashboard.build_parser().parse_args(["--model", model_dir, *options])
    app, llm, _ = dashboard.create_app(args)
    with BackgroundServer(wrap(app)) as server:
        llm.wait_ready(120)
        live = Live(server.url, llm)

        def keep(record) -> None:
            with live.lock:
                live.records.append(record if isinstance(record, dict) else record.to_dict())

        unsubscribe = llm.subscribe(keep)
        try:
            yield live
        finally:
            unsubscribe()


def open_page(driver, live: Live) -> None:
    driver.get(live.url + "/")
    wait_for(driver, lambda: (s := debug(driver)) and s["viewer"] and s["connected"]
             and (s["status"] or {}).get("state") == "ready", "the page to connect")


def choose_preset(driver, title_part: str) -> None:
    """Pick the workload whose title contains ``title_part`` in the page's dropdown."""
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.CSS_SELECTOR, "#bs-controls input[role=combobox]")
    options = "[role=listbox] li[role=option]"

    def listed():  # a click on a page still settling can leave the list closed: click again
        shown = driver.find_elements(By.CSS_SELECTOR, options)
        if not shown:
            box.click()
        return next((o for o in shown if title_part in o.get_attribute("aria-label")), None)

    option = wait_for(driver, listed, f"the preset {title_part!r}")
    option.click()
    wait_for(driver, lambda: title_part in box.get_attribute("value"), "the preset chosen")


def set_knob(driver, label: str, value: int, after: int) -> None:
    """Type ``value`` into the slider whose label starts with ``label``, once it shows
    ``after`` (the value a preset just gave it, which would otherwise overwrite ours)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    number = driver.find_element(By.CSS_SELECTOR, f"#bs-controls input[aria-label^='number input for {label}']")
    wait_for(driver, lambda: number.get_attribute("value") == str(after), f"{label} at {after}")
    number.send_keys(Keys.CONTROL, "a")
    number.send_keys(str(value), Keys.TAB)
    wait_for(driver, lambda: number.get_attribute("value") == str(value), f"{label} set to {value}")


def fire(driver) -> list[str]:
    """Click Fire; the new ids the page's fire status names (an earlier shot's status, shown
    again while the page updates, does not count)."""
    from selenium.webdriver.common.by import By

    known = set(debug(driver)["requests"])

    def fired() -> list[str] | None:  # "Fired 3: A1, B2, C3" (then maybe " · " and the Chinese)
        text = driver.find_element(By.ID, "bs-fire-status").text
        found = re.search(r":\s*([A-Za-z]+\d+(?:,\s*[A-Za-z]+\d+)*)\s*(?:·|$)", text)
        ids = re.split(r",\s*", found[1]) if found else []
        return ids if ids and not known & set(ids) else None

    driver.find_element(By.ID, "bs-fire").click()
    return wait_for(driver, fired, "the fire status", 30)


def presenter(driver, control: str) -> None:
    """Click the presenter's pause / step / resume button."""
    driver.find_element("id", f"bs-{control}").click()


def step(driver, live: Live) -> dict:
    """One presenter step: the engine's new record, once every view draws it."""
    before = live.last_record()
    presenter(driver, "step")
    record = wait_for(driver, lambda: (r := live.last_record()) is not before and r, "the engine to step")
    wait_for(driver, lambda: shows(driver, record), f"step {record['step']} drawn")
    return record
