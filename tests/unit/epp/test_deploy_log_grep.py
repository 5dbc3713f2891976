"""docs/deploy.md step 8's log grep finds the decision lines the picker really writes: a real
decision through the servicer, formatted by the picker's own JSON formatter (the one
``configure_logging`` installs), fed to ``grep`` with the guide's arguments."""

from __future__ import annotations

import json
import logging
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from smetric.epp.obs.logging import DECISION_LOGGER, JsonFormatter, set_decision_log
from tests.support.epp_harness import BASE_HEADERS, body_msgs, build, chat, exchange, headers_msg

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "deploy.md"
GREP_TIMEOUT_S = 10


def guide_grep() -> list[str]:
    """The ``grep`` of step 8's ``kubectl logs`` pipeline, as argv."""
    step = GUIDE.read_text().split("## 8.", 1)[1].split("\n## ", 1)[0]
    (line,) = [line for line in step.splitlines() if "kubectl" in line and " logs " in line]
    stages = [shlex.split(stage, comments=True) for stage in line.split("|")]
    (grep,) = [stage for stage in stages if stage and stage[0] == "grep"]
    return grep


async def test_the_guides_grep_matches_a_real_decision_line(
    serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    if shutil.which("grep") is None:
        pytest.skip("no grep binary")
    servicer, *_ = build()
    stub = await serve(servicer)
    caplog.set_level(logging.INFO, logger="smetric.epp")
    set_decision_log(True)
    try:
        await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])
    finally:
        set_decision_log(False)
    (record,) = [r for r in caplog.records if r.name == DECISION_LOGGER]
    routed = JsonFormatter().format(record)
    other = JsonFormatter().format(
        logging.makeLogRecord({"name": "smetric.epp", "msg": "listening", "levelname": "INFO"})
    )
    assert json.loads(routed)["msg"] == "routed"
    found = subprocess.run(
        guide_grep(),
        input=f"{other}\n{routed}\n{other}\n",
        capture_output=True,
        text=True,
        timeout=GREP_TIMEOUT_S,
    )
    assert found.stdout.splitlines() == [routed], (guide_grep(), routed[:120])


def test_the_old_pattern_found_nothing() -> None:
    """The pattern the guide had (``"msg": "routed"``, a space after the colon) never matches the
    compact JSON the picker writes."""
    line = JsonFormatter().format(
        logging.makeLogRecord({"name": DECISION_LOGGER, "msg": "routed", "levelname": "INFO"})
    )
    assert '"msg":"routed"' in line and not re.search(re.escape('"msg": "routed"'), line)
