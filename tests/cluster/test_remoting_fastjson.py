"""fastjson bodies: bare numeric keys, object keys, and input nothing should accept."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.remoting.fastjson import MAX_DEPTH, FastjsonError, ObjectKey, loads_fastjson

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_standard_json_reads_as_json_does(value):
    text = json.dumps(value)
    assert loads_fastjson(text) == json.loads(text)
    assert loads_fastjson(text.encode()) == json.loads(text)


@given(st.dictionaries(st.integers(-(2**63), 2**63 - 1), st.text(max_size=10), max_size=5))
def test_bare_numeric_keys_read_as_ints(table):
    text = "{" + ",".join(f"{key}:{json.dumps(value)}" for key, value in table.items()) + "}"
    assert loads_fastjson(text) == table


def test_cluster_info_shape():
    body = (b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},'
            b'"brokerName":"broker-a","cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}')
    info = loads_fastjson(body)
    assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}


def test_object_keys_are_frozen_and_thaw_back():
    body = ('{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"brokerOffset":5,"consumerOffset":3},'
            '{"brokerName":"broker-a","queueId":1,"topic":"T","tags":["x"],"nested":{"a":1}}:{"brokerOffset":2}}}')
    table = loads_fastjson(body)["offsetTable"]
    first, second = table
    assert isinstance(first, ObjectKey) and first.as_dict() == {"brokerName": "broker-a", "queueId": 0, "topic": "T"}
    assert first.get("queueId") == 0 and first.get("missing", "-") == "-"
    assert table[first] == {"brokerOffset": 5, "consumerOffset": 3}
    assert second.as_dict()["tags"] == ["x"] and second.as_dict()["nested"] == {"a": 1}
    assert hash(second) == hash(ObjectKey.of(second.as_dict()))


def test_lenient_forms_fastjson_itself_accepts():
    assert loads_fastjson("{name:'it\\'s',\n 'b':\"q\\\"\" , list:[1,,2,],}") == {
        "name": "it's", "b": 'q"', "list": [1, 2]}
    assert loads_fastjson('{true:1}') == {True: 1}


@pytest.mark.parametrize("bad", [
    "", "{", "[1,2", '{"a" 1}', '{"a":1 "b":2}', "{'a:1}", '"\\x"', "nope", "{1:2} x",
    b"\xff{1:2}", "[" * (MAX_DEPTH + 5) + "{1:2}" + "]" * (MAX_DEPTH + 5), "{" + "{1:" * 300,
])
def test_unreadable_text_raises(bad):
    with pytest.raises(FastjsonError):
        loads_fastjson(bad)
