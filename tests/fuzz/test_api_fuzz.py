"""Property-based fuzzing of the REST API against its own OpenAPI document (schemathesis).

Every operation of /openapi.json is called with generated requests, valid and invalid, as the
admin, on a fresh store in process (schemathesis's ASGI transport runs the app's lifespan). Each
response must not be a 5xx, must have a status the operation declares, and must match the body
it declares. Then workflows follow the document's links: a message put is looked up by the ids
its answer gives, a message received is acknowledged with its receipt handle.

A failure prints the request to replay it (curl) and the seed of the run; the server's traceback
of a 5xx is in the captured log. Bounded for CI: MQLENS_FUZZ_EXAMPLES generated requests per
operation (20 by default: under a minute on 2 cores) with a fixed seed, so a run is reproducible.
`make fuzz` runs more with a random seed; MQLENS_FUZZ_SEED=N replays the run that printed seed N.
"""

from __future__ import annotations

import hashlib
import os
import random
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from app.main import create_app
from app.services import accounts
from store.broker.pop import MAX_WAIT_MS
from tests.app.conftest import ADMIN_TOKEN, TEST_HOST, check_store, make_settings

EXAMPLES = int(os.environ.get("MQLENS_FUZZ_EXAMPLES", "20"))
_SEED = os.environ.get("MQLENS_FUZZ_SEED", "")
SEED = random.getrandbits(64) if _SEED == "random" else int(_SEED or "20250613")
REPLAY = f"MQLENS_FUZZ_SEED={SEED} MQLENS_FUZZ_EXAMPLES={EXAMPLES} replays this run"
HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Host": TEST_HOST}
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
FUZZ_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                         suppress_health_check=list(HealthCheck))
# Pipeline runs start the stand-in of the job command (as tests/app/test_pipeline_runs.py does), not Spark.
FAKE_PIPELINE = shlex.join([sys.executable, str(Path(__file__).parents[1] / "app" / "fake_pipeline.py")])
# A receive waits up to wait_ms (real time) for messages, which seldom come here: a short wait
# runs the same code, the longest would make one request take a minute.
LONGEST_WAIT_MS = 50
assert LONGEST_WAIT_MS < MAX_WAIT_MS


def _document() -> dict[str, Any]:
    """The app's OpenAPI document (building the app opens nothing: its lifespan does)."""
    return create_app(make_settings(Path("openapi-only"))).openapi()


schema = schemathesis.openapi.from_dict(
    _document(), config=SchemathesisConfig.from_dict({"seed": SEED, "cache": {"enabled": False}}))


@pytest.fixture(scope="module")
def fuzzed_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FastAPI]:
    """The app on a fresh store: schemathesis runs its lifespan from the first request on."""
    print(f"fuzzing with seed {SEED}, {EXAMPLES} examples per operation ({REPLAY})")
    app_settings = make_settings(tmp_path_factory.mktemp("fuzz") / "data", pipeline_command=FAKE_PIPELINE)
    app = create_app(app_settings)
    try:
        yield app
    finally:
        asgi.shutdown_lifespans()
    check_store(app_settings)


def _bounded(case: schemathesis.Case) -> None:
    if case.path == "/api/groups/{group}/receive" and isinstance(case.body, dict):
        wait_ms = case.body.get("wait_ms")
        if type(wait_ms) is int and wait_ms > LONGEST_WAIT_MS:
            case.body["wait_ms"] = LONGEST_WAIT_MS


def _keep_our_token(case: schemathesis.Case, app: FastAPI) -> None:
    """A revoke may hit the token the fuzzer signs in with: it is made good again (as a restart
    with MQLENS_BOOTSTRAP_ADMIN_TOKEN would), so the operations after it are still reached."""
    if case.method.upper() == "DELETE" and case.path.startswith("/api/tokens/"):
        accounts.ensure_bootstrap_token(app.state.sessions, app.state.clock, ADMIN_TOKEN)
        app.state.principal_cache.clear()


# Each operation is a test of its own (schemathesis's pytest plugin names them all alike under
# pytest 9, which pytest-xdist cannot tell apart: so they are parametrized here).
OPERATIONS = [result.ok() for result in schema.get_all_operations()]


def _operation_seed(label: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{SEED}:{label}".encode(), digest_size=8).digest(), "big")


@pytest.mark.parametrize("operation", OPERATIONS, ids=[operation.label for operation in OPERATIONS])
def test_each_operation_answers_as_the_document_says(operation: Any, fuzzed_app: FastAPI) -> None:
    """Valid requests and invalid ones (of the wrong type, out of range, breaking a pattern...)."""
    cases = st.one_of(operation.as_strategy(schemathesis.GenerationMode.POSITIVE),
                     operation.as_strategy(schemathesis.GenerationMode.NEGATIVE))

    @hypothesis.seed(_operation_seed(operation.label))
    @FUZZ_SETTINGS
    @hypothesis.given(case=cases)
    def answers_as_documented(case: schemathesis.Case) -> None:
        _bounded(case)
        try:
            case.call_and_validate(app=fuzzed_app, headers=HEADERS, checks=CHECKS)
        finally:
            _keep_our_token(case, fuzzed_app)

    try:
        answers_as_documented()
    except Exception as exc:
        exc.add_note(REPLAY)
        raise


def test_workflows_along_the_documents_links_answer_as_it_says(fuzzed_app: FastAPI) -> None:
    """MQLENS_FUZZ_EXAMPLES scenarios of up to 10 calls, each call after the first one following a
    link of the answer before it, or starting anew."""
    failures: list[Exception] = []
    scenarios = 0

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            nonlocal scenarios
            scenarios += 1

        def before_call(self, case: schemathesis.Case) -> None:
            _bounded(case)

        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {"app": fuzzed_app, "headers": HEADERS}

        def after_call(self, response: Any, case: schemathesis.Case) -> None:
            _keep_our_token(case, fuzzed_app)

        def validate_response(self, response: Any, case: schemathesis.Case, additional_checks: Any = None,
                              **kwargs: Any) -> None:
            try:
                case.validate_response(response, checks=CHECKS, headers=HEADERS, transport_kwargs=kwargs)
            except Exception as exc:
                failures.append(exc)
                raise

    workflow_settings = settings(FUZZ_SETTINGS, stateful_step_count=10, phases=[hypothesis.Phase.generate])
    for attempt in range(5):
        try:
            hypothesis.seed(SEED + attempt)(Workflow).run(settings=workflow_settings)
        except hypothesis.errors.Flaky:
            # The store lives on from one scenario to the next, so Hypothesis cannot replay a scenario
            # the same way (as schemathesis's own runner, it is then no failure unless a check failed).
            if failures:
                failures[0].add_note(REPLAY)
                raise failures[0] from None
        except Exception as exc:
            exc.add_note(REPLAY)
            raise
        if scenarios >= EXAMPLES:
            break
