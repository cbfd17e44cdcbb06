"""The console's search and message pages: HTML and JSON twin from the same data, htmx fragments,
cursor paging, body views, inert payloads, and helpful errors in both forms."""

from __future__ import annotations

import base64
import json
import re

import pytest

from tests.app.conftest import assert_error, put_messages

pytestmark = pytest.mark.anyio

HTML = {"Accept": "text/html"}
PAYLOAD = '<script>alert("x")</script><img src=x onerror=alert(1)>'


async def produce(api, topic="Orders", **fields) -> dict:
    body = {} if "body_base64" in fields else {"body": "x"}
    return (await put_messages(api, topic, {**body, **fields}))[0]


async def html(api, url, status=200, **headers) -> str:
    r = await api.client.get(url, headers={**HTML, **headers})
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("text/html")
    return r.text


def assert_html_error(page: str, status: int, fragment: str) -> None:
    assert f'data-status="{status}"' in page
    assert fragment in page
    assert "Traceback" not in page


async def test_search_page_and_its_json_twin_show_the_same_results(api):
    older = await produce(api, keys=["order-1"], tags="paid")
    put = await produce(api, keys=["order-1"], tags="paid")
    page = await html(api, "/search?q=order-1")
    twin = (await api.client.get("/search.json?q=order-1")).json()
    assert twin["ok"] is True and twin["recognised_as"] == "key"
    assert [m["offset_msg_id"] for m in twin["messages"]] == [put["offset_msg_id"], older["offset_msg_id"]]
    assert f'href="/messages/{put["offset_msg_id"]}"' in page
    assert "looked up as <strong>key</strong>" in page and "paid" in page
    empty = await html(api, "/search")
    assert "Type an offset message id" in empty
    # an exact single match opens the message (its JSON twin and htmx still get the list)
    only = await produce(api, keys=["order-2"])
    r = await api.client.get("/search?q=order-2", headers=HTML)
    assert r.status_code == 303 and r.headers["location"] == f"/messages/{only['offset_msg_id']}"
    assert len((await api.client.get("/search.json?q=order-2")).json()["messages"]) == 1


async def test_search_without_a_topic_lists_the_dead_letter_copy(api):
    await api.client.put("/api/groups/G", json={"max_reconsume_times": 0})
    put = await produce(api, keys=["order-9"])
    api.store.send_back(put["phys_offset"], "G")
    twin = (await api.client.get("/search.json", params={"q": "order-9"})).json()
    assert [(m["copy"], m["topic"]) for m in twin["messages"]] == [("dead_letter", "%DLQ%G"), ("original", "Orders")]
    page = await html(api, "/search?q=order-9")
    assert "dead letter" in page and "%DLQ%G" in page


async def test_search_pages_with_a_cursor_and_says_when_a_page_is_not_everything(api, clock):
    ids = []
    for _ in range(5):
        ids.append((await produce(api, keys=["busy"]))["offset_msg_id"])
        clock.advance(1)
    newest_first = ids[::-1]
    seen, url = [], "/search.json?q=busy&max=2"
    pages = 0
    while url:
        data = (await api.client.get(url)).json()
        seen += [m["offset_msg_id"] for m in data["messages"]]
        assert data["truncated"] is (data["next_url"] is not None)
        url = data["next_url"] and data["next_url"].replace("/search?", "/search.json?")
        pages += 1
    assert seen == newest_first and pages == 3
    first = await html(api, "/search?q=busy&max=2")
    assert 'data-testid="incomplete"' in first and 'rel="next"' in first
    last = await html(api, "/search?q=busy&max=10")
    assert 'data-testid="incomplete"' not in last


async def test_same_millisecond_messages_are_neither_lost_nor_repeated_across_pages(api):
    ids = [(await produce(api, keys=["same-ms"]))["offset_msg_id"] for _ in range(11)]
    seen, url = [], "/search.json?q=same-ms&max=2"
    while url:
        data = (await api.client.get(url)).json()
        seen += [m["offset_msg_id"] for m in data["messages"]]
        url = data["next_url"] and data["next_url"].replace("/search?", "/search.json?")
    assert sorted(seen) == sorted(ids) and len(seen) == len(set(seen))


async def test_htmx_search_gets_only_the_results_fragment(api):
    await produce(api, keys=["frag"])
    r = await api.client.get("/search?q=frag", headers={**HTML, "HX-Request": "true", "HX-Target": "results"})
    assert r.status_code == 200
    assert "<table" in r.text and "<html" not in r.text and "<form" not in r.text


@pytest.mark.parametrize(("query", "status", "fragment"), [
    ("q=x&max=0", 400, "max must be 1 to 500"),
    ("q=x&max=lots", 400, "max must be a whole number"),
    ("q=x&begin=yesterday", 400, "begin must be epoch milliseconds or a date and time"),
    ("q=x&begin=2000&end=1000", 400, "ends before it begins"),
    ("q=x&cursor=bogus", 400, "malformed cursor"),
    ("q=Orders:0:99", 404, "offset 99 is outside queue Orders:0"),
    ("q=a%20b", 400, "without spaces"),
    ("q=x&topic=bad/topic", 400, "invalid topic"),
])
async def test_bad_search_input_is_a_4xx_with_a_message_in_both_forms(api, query, status, fragment):
    await produce(api)
    assert_error(await api.client.get(f"/search.json?{query}"), status, fragment)
    page = await html(api, f"/search?{query}", status=status)
    assert_html_error(page, status, fragment)


async def test_message_page_shows_every_field_both_ids_and_the_other_copies(api):
    await api.client.put("/api/groups/G", json={"max_reconsume_times": 0})
    put = await produce(api, keys=["k1", "k2"], tags="paid", properties={"region": "eu"}, body='{"a": [1, 2]}')
    api.store.send_back(put["phys_offset"], "G")
    dead = (await api.client.get("/api/messages/by-key", params={"key": "k1", "topic": "%DLQ%G"})).json()
    dead_id = dead["messages"][0]["offset_msg_id"]
    page = await html(api, f"/messages/{put['offset_msg_id']}")
    for text in (put["offset_msg_id"], put["unique_key"], "paid", "k1 k2", "region", "eu", "Commit log offset",
                 f'data-copy="{put["offset_msg_id"]}"', f'data-copy="{put["unique_key"]}"',
                 f'href="/messages/{dead_id}"', 'rel="bookmark"', f'/messages/{put["unique_key"]}/timeline'):
        assert text in page, text
    assert '<pre class="body" data-view="json">{\n  &#34;a&#34;: [' in page  # pretty JSON chosen by default
    twin = (await api.client.get(f"/messages/{put['offset_msg_id']}.json")).json()
    assert twin["message"]["keys"] == ["k1", "k2"] and twin["body"]["best"] == "json"
    assert [c["offset_msg_id"] for c in twin["copies"]] == [dead_id]
    back = (await api.client.get(f"/messages/{dead_id}.json")).json()
    assert [c["offset_msg_id"] for c in back["copies"]] == [put["offset_msg_id"]]


async def test_body_views_and_the_download_of_a_large_binary_body(api):
    body = bytes(range(256)) * 400  # 100 KiB, not UTF-8
    put = await produce(api, body_base64=base64.b64encode(body).decode())
    twin = (await api.client.get(f"/messages/{put['offset_msg_id']}.json")).json()
    assert twin["body"]["best"] == "hex" and twin["body"]["previewed"] is True and twin["body"]["text"] is None
    assert base64.b64decode(twin["body"]["base64"]) == body[:64 * 1024]
    hex_page = await html(api, f"/messages/{put['offset_msg_id']}")
    assert "00000010  10 11 12 13" in hex_page and "Hex of the first 4.0 KiB" in hex_page
    text_view = await html(api, f"/messages/{put['offset_msg_id']}?view=text")
    assert "not UTF-8 text" in text_view
    download = await api.client.get(f"/messages/{put['offset_msg_id']}/body")
    assert download.content == body
    assert download.headers["content-type"] == "application/octet-stream"
    assert download.headers["x-content-type-options"] == "nosniff"
    assert "attachment" in download.headers["content-disposition"]
    fragment = await html(api, f"/messages/{put['offset_msg_id']}?view=base64", **{"HX-Request": "true",
                                                                                   "HX-Target": "body-view"})
    assert 'data-view="base64"' in fragment and "<html" not in fragment and "<table" not in fragment


async def test_a_large_text_body_is_previewed_with_a_download_link(api):
    body = "é" * 40_000  # 80,000 bytes of UTF-8: the preview cuts inside a character
    put = await produce(api, body=body)
    twin = (await api.client.get(f"/messages/{put['offset_msg_id']}.json")).json()
    assert twin["body"]["previewed"] is True and twin["body"]["text"] == "é" * (64 * 1024 // 2)
    page = await html(api, f"/messages/{put['offset_msg_id']}")
    assert "Showing the first 64.0 KiB of 78.1 KiB" in page and "Download the whole body" in page


async def test_payloads_in_body_keys_tags_and_properties_render_inert(api):
    put = await produce(api, body=PAYLOAD, keys=["<b>k</b>"], tags="<i>t</i>", properties={"p": PAYLOAD})
    await produce(api, body=PAYLOAD, keys=["<b>k</b>"], tags="<i>t</i>")  # two hits: the search lists them
    for url in (f"/messages/{put['offset_msg_id']}", f"/messages/{put['offset_msg_id']}?view=json",
                "/search?q=%3Cb%3Ek%3C%2Fb%3E", f"/messages/{put['offset_msg_id']}?view=hex"):
        page = await html(api, url)
        assert "<script>alert" not in page and "<img src=x" not in page and "<b>k</b>" not in page, url
        assert "<i>t</i>" not in page
    page = await html(api, f"/messages/{put['offset_msg_id']}")
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page
    r = await api.client.get(f"/messages/{put['offset_msg_id']}", headers=HTML)
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(("path", "status", "fragment"), [
    ("/messages/zz", 400, "malformed offset message id"),
    ("/messages/" + "G" * 32, 400, "malformed offset message id"),
    ("/messages/7F00000100002A9F00000000FFFFFFFF", 404, "no message with offset id"),
    ("/messages/7F00000100002A9F0000000000000000?view=pdf", 400, "unknown body view"),
    ("/messages/7F00000100002A9F00000000FFFFFFFF/body", 404, "no message with offset id"),
    ("/no/such/page", 404, "not found: /no/such/page"),
])
async def test_unknown_and_malformed_ids_are_helpful_in_json_and_html(api, path, status, fragment):
    await produce(api)
    base, _, query = path.partition("?")
    twin = f"{base}.json" + (f"?{query}" if query else "")
    assert_error(await api.client.get(twin), status, fragment)
    page = await html(api, path, status=status)
    assert_html_error(page, status, fragment)
    assert 'href="/search"' in page  # a way on from the error page


async def test_an_htmx_request_that_fails_gets_the_error_fragment_for_the_banner(api):
    r = await api.client.get("/messages/zz?view=text", headers={**HTML, "HX-Request": "true",
                                                                 "HX-Target": "body-view"})
    assert r.status_code == 400
    assert r.headers["hx-retarget"] == "#error-banner"
    assert "malformed offset message id" in r.text and "<html" not in r.text


async def test_api_errors_stay_json_even_for_a_browser(api):
    r = await api.client.get("/api/messages/by-id/zz", headers=HTML)
    assert_error(r, 400, "malformed offset message id")


async def test_every_page_links_its_json_twin_and_the_docs_work_offline(api):
    page = await html(api, "/search?q=a")
    assert 'href="/search.json?q=a"' in page
    docs = await api.client.get("/docs")
    assert docs.status_code == 200
    scripts = re.findall(r'src="([^"]+)"', docs.text) + re.findall(r'href="([^"]+\.css)"', docs.text)
    assert scripts and all(s.startswith("/static/") for s in scripts)
    for asset in scripts:
        assert (await api.client.get(asset)).status_code == 200, asset
    openapi = (await api.client.get("/openapi.json")).json()
    assert "/api/search" in openapi["paths"] and "/search" not in openapi["paths"]
    assert json.loads((await api.client.get("/search.json")).text)["searched"] is False


async def test_a_stored_unique_key_the_index_cannot_be_asked_for_still_shows_its_message(api):
    import dataclasses

    from store.broker.record_builder import NewMessage

    api.store.config = dataclasses.replace(api.store.config, trace=False)
    put = api.store.put(NewMessage("Orders", b"odd client", properties={"UNIQ_KEY": "has space"}))
    twin = (await api.client.get(f"/messages/{put.offset_msg_id}.json")).json()
    assert twin["ok"] is True and twin["message"]["unique_key"] == "has space" and twin["copies"] == []
