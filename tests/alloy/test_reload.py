"""Config reload as Alloy does it (issue 18, item 16): SIGHUP and /-/reload re-read the file,
validate it, apply the diff of components, and keep the running graph when the file is bad."""

from __future__ import annotations

import signal
import time
import urllib.request

from ..conftest import wait_for


def _config(writes: list[str], service: str) -> str:
    out = [f'pyroscope.write "{w}" {{\n  endpoint {{\n    url = "http://127.0.0.1:9"\n  }}\n}}\n' for w in writes]
    out.append(f'discovery.relabel "r" {{\n  targets = [{{"__address__" = "x", "service_name" = "{service}"}}]\n'
               f'  rule {{\n    action = "replace"\n    target_label = "env"\n    replacement = "{service}-env"\n  }}\n}}\n')
    return "".join(out)


def _ids(a) -> set[str]:
    return {c["id"] for c in a.json("/api/v0/web/components")}


def _request(a, path: str, method: str) -> tuple[int, str]:
    req = urllib.request.Request(a.url(path), method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _metric(a, name: str) -> float:
    line = next(ln for ln in a.get("/metrics")[1].splitlines() if ln.startswith(name + " "))
    return float(line.split()[-1])


def test_sighup_applies_the_diff_and_keeps_the_graph_on_a_bad_file(agent, tmp_path):
    a = agent(_config(["a"], "one"))
    a.wait_ready()
    path = tmp_path / "agent.alloy"
    assert _ids(a) == {"pyroscope.write.a", "discovery.relabel.r"}
    relabel_before = a.json("/api/v0/web/components/discovery.relabel.r")
    assert relabel_before["exports"]["output"][0]["env"] == "one-env"

    # A new write, the old one gone, the kept relabel with new arguments: applied while running.
    path.write_text(_config(["b"], "two"))
    a.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: _ids(a) == {"pyroscope.write.b", "discovery.relabel.r"}, timeout=30), _ids(a)
    assert wait_for(lambda: a.json("/api/v0/web/components/discovery.relabel.r")["exports"]["output"][0]["env"]
                    == "two-env", timeout=30)
    assert a.proc.poll() is None
    log = a.log.read_text()
    assert "config reloaded from" in log and "added: pyroscope.write.b" in log and "removed: pyroscope.write.a" in log
    assert _metric(a, "alloy_config_last_load_successful") == 1

    # A bad file: one error line, the running graph unchanged, the agent still serving.
    path.write_text(_config(["b"], "three") + 'pyroscope.write "c" {\n  endpoint {\n    url = "http://h:99999"\n')
    a.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: "config reload failed" in a.log.read_text(), timeout=30), a.log.read_text()[-2000:]
    line = next(ln for ln in a.log.read_text().splitlines() if "config reload failed" in ln)
    assert "the running pipeline is unchanged" in line and f"{path}:" in line, line
    assert a.proc.poll() is None and a.get("/-/ready")[0] == 200
    assert _ids(a) == {"pyroscope.write.b", "discovery.relabel.r"}
    assert a.json("/api/v0/web/components/discovery.relabel.r")["exports"]["output"][0]["env"] == "two-env"
    assert _metric(a, "alloy_config_last_load_successful") == 0
    assert _metric(a, "alloy_config_load_failures_total") == 1

    # /-/reload, as Alloy: 400 with the error while the file is bad, 200 once it is fixed.
    status, text = _request(a, "/-/reload", "POST")
    assert status == 400 and "expected '}'" in text, (status, text)
    path.write_text(_config(["b", "c"], "four"))
    status, text = _request(a, "/-/reload", "GET")
    assert status == 200 and "config reloaded" in text and "added: pyroscope.write.c" in text, (status, text)
    assert _ids(a) == {"pyroscope.write.b", "pyroscope.write.c", "discovery.relabel.r"}
    assert _metric(a, "alloy_config_last_load_successful") == 1
    assert a.stop() == 0
    assert "Traceback" not in a.log.read_text()


def test_sighup_on_a_vanished_config_keeps_running(agent, tmp_path):
    a = agent(_config(["a"], "one"))
    a.wait_ready()
    (tmp_path / "agent.alloy").unlink()
    a.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: "config reload failed" in a.log.read_text(), timeout=30)
    assert "cannot read config" in a.log.read_text()
    time.sleep(0.5)
    assert a.proc.poll() is None and _ids(a) == {"pyroscope.write.a", "discovery.relabel.r"}
    assert a.stop() == 0
