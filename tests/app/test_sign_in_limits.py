"""Failed sign-ins slow the guesser without locking the owner out (per name and address, with
backoff; a name under attack gives each address one try), password checks run a few at a time
(beyond: 429 with Retry-After), and X-Forwarded-For is believed from configured proxies only.

Time is the app's fake clock; addresses are the ASGI client addresses of separate clients."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from app.services.login_limit import LoginLimiter
from store.clock import FakeClock
from tests.app.conftest import TEST_HOST, make_settings, running
from tests.live_server import LiveServer, wait_until

ORIGIN = f"http://{TEST_HOST}"
ATTACKER, OWNER = "198.51.100.7", "203.0.113.20"
OWNER_PASSWORD = "owner-password-1"


def browser(api, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=api.app, client=(address, 50_000))
    return httpx.AsyncClient(transport=transport, base_url=ORIGIN)


async def sign_in(client: httpx.AsyncClient, name: str, password: str, **headers: str) -> httpx.Response:
    return await client.post("/login", data={"name": name, "password": password, "next": "/"},
                             headers={"Origin": ORIGIN, "Sec-Fetch-Site": "same-origin", **headers})


async def add_owner(api, name: str = "olga") -> None:
    r = await api.client.post("/api/users", json={"name": name, "password": OWNER_PASSWORD, "role": "viewer"})
    assert r.status_code == 201, r.text


@pytest.mark.anyio
async def test_wrong_passwords_from_one_address_do_not_lock_the_owner_out_of_another(api):
    await add_owner(api)
    async with browser(api, ATTACKER) as attacker, browser(api, OWNER) as owner:
        for _ in range(5):
            assert (await sign_in(attacker, "olga", "guess-guess-guess")).status_code == 401
        r = await sign_in(attacker, "olga", OWNER_PASSWORD)  # the right password waits there too
        assert r.status_code == 429 and "too many failed sign-ins" in r.text
        assert (await sign_in(owner, "olga", OWNER_PASSWORD)).status_code == 303


@pytest.mark.anyio
async def test_each_further_failure_waits_twice_as_long_and_a_success_forgets_them(api, clock):
    await add_owner(api)
    async with browser(api, ATTACKER) as client:
        for _ in range(5):
            assert (await sign_in(client, "olga", "guess-guess-guess")).status_code == 401
        for wait_s in (1, 2, 4, 8):
            r = await sign_in(client, "olga", "guess-guess-guess")
            assert r.status_code == 429 and r.headers["retry-after"] == str(wait_s)
            clock.advance(wait_s * 1000 - 1)
            assert (await sign_in(client, "olga", "guess-guess-guess")).status_code == 429
            clock.advance(1)
            assert (await sign_in(client, "olga", "guess-guess-guess")).status_code == 401
        clock.advance(16_000)
        assert (await sign_in(client, "olga", OWNER_PASSWORD)).status_code == 303
        for _ in range(5):  # the success forgot the failures before it
            assert (await sign_in(client, "olga", "guess-guess-guess")).status_code == 401


@pytest.mark.anyio
async def test_a_name_under_attack_from_many_addresses_gives_each_address_one_try(data_dir, clock):
    async with running(make_settings(data_dir, failed_logins_per_minute=2), clock) as api:
        await add_owner(api)
        for n in range(10):  # five times the free failures, each from an address of its own
            async with browser(api, f"198.51.100.{n + 1}") as attacker:
                assert (await sign_in(attacker, "olga", "guess-guess-guess")).status_code == 401
        async with browser(api, "198.51.100.200") as attacker:
            assert (await sign_in(attacker, "olga", "guess-guess-guess")).status_code == 401
            r = await sign_in(attacker, "olga", "guess-guess-guess")  # a second free failure before the attack
            assert r.status_code == 429 and r.headers["retry-after"] == "1"
        async with browser(api, OWNER) as owner:
            assert (await sign_in(owner, "olga", OWNER_PASSWORD)).status_code == 303
        clock.advance(15 * 60_000)  # the attack is over: two free failures again
        async with browser(api, "198.51.100.201") as other:
            for _ in range(2):
                assert (await sign_in(other, "olga", "guess-guess-guess")).status_code == 401


def test_successful_sign_ins_count_against_no_limit():
    """Each try is charged as a failure before its password is checked; a success takes it back."""
    limiter = LoginLimiter(FakeClock(), free_failures=1)  # ten failures a minute from one address
    for n in range(30):
        assert limiter.retry_after_s(f"user-{n % 3}", OWNER) == 0
        limiter.succeeded(f"user-{n % 3}", OWNER, limiter.failed(f"user-{n % 3}", OWNER))
    for n in range(10):
        assert limiter.retry_after_s(f"other-{n}", OWNER) == 0
        limiter.failed(f"other-{n}", OWNER)
    assert limiter.retry_after_s("other-10", OWNER) == 60


@pytest.mark.anyio
async def test_sign_ins_beyond_the_password_check_pool_are_refused_with_429(data_dir, clock):
    settings = make_settings(data_dir, password_checks=1, password_checks_waiting=1)
    async with running(settings, clock) as api:
        await add_owner(api)
        pool = api.app.state.password_checks
        pool.max_wait_s = 60  # the waiting sign-in outwaits this test's own requests, however slow the machine
        async with browser(api, OWNER) as owner, browser(api, ATTACKER) as other:
            results: list[httpx.Response] = []
            async with anyio.create_task_group() as tasks, pool.slot():  # the pool's one check is busy
                tasks.start_soon(lambda: _append(results, sign_in(owner, "olga", OWNER_PASSWORD)))
                await _until(lambda: pool.waiting == 1)
                html = await sign_in(other, "olga", "guess-guess-guess", Accept="text/html")
                data = await sign_in(other, "olga", "guess-guess-guess", Accept="application/json")
            for r in (html, data):
                assert r.status_code == 429 and r.headers["retry-after"] == "1"
            assert "too many sign-ins in progress" in html.text and html.headers["content-type"].startswith("text/html")
            assert data.json()["ok"] is False and "too many sign-ins in progress" in data.json()["error"]
            assert [r.status_code for r in results] == [303]  # the one that waited got its turn
            # refused before its check: no failure was counted, the next guess is checked
            assert (await sign_in(other, "olga", "guess-guess-guess")).status_code == 401


async def _append(results: list, request) -> None:
    results.append(await request)


async def _until(condition) -> None:
    with anyio.fail_after(30):
        while not condition():
            await anyio.sleep(0)


def test_forwarded_addresses_are_believed_only_from_configured_proxies(tmp_path: Path):
    """A client on loopback cannot pose as many addresses to get around the per-address limit."""
    data, log = tmp_path / "data", tmp_path / "server.log"
    forwarded = "192.0.2.55"
    with LiveServer(data, log) as server:
        server.start()
        r = httpx.post(f"{server.base_url}/login", data={"name": "ghost", "password": "guess-guess-guess"},
                       headers={"X-Forwarded-For": forwarded}, timeout=60)
        assert r.status_code == 401
        assert server.stop() == 0
        # the access log names the peer's address: the one the sign-in limits count
        assert '127.0.0.1:' in server.log_text() and forwarded not in server.log_text()
    with LiveServer(data, log, {"trusted_proxies": "127.0.0.1, ::1"}) as server:
        server.start()
        r = httpx.post(f"{server.base_url}/login", data={"name": "ghost", "password": "guess-guess-guess"},
                       headers={"X-Forwarded-For": forwarded}, timeout=60)
        assert r.status_code == 401
        wait_until(lambda: f'{forwarded}:0 - "POST /login' in server.log_text(), 30, "the access log line")


@pytest.mark.parametrize("proxies", ["proxy.example", "10.0.0.300", "10.0.0.0/40"])
def test_a_trusted_proxy_is_an_address_or_network(tmp_path: Path, proxies: str):
    with pytest.raises(ValueError, match="a trusted proxy is an IP address or network"):
        make_settings(tmp_path, trusted_proxies=proxies)
    assert make_settings(tmp_path, trusted_proxies="10.0.0.2, 192.168.0.0/16").trusted_proxy_list() == [
        "10.0.0.2", "192.168.0.0/16"]
