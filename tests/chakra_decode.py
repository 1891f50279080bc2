"""Decodes a Chakra ET file with Python's protobuf, from the schema alone
(tests/chakra_cli_test.cc; an independent reader of what traces/chakra.cc writes):

    /usr/bin/python3 tests/chakra_decode.py SCHEMA_PY_DIR FILE

SCHEMA_PY_DIR holds chakra_et_pb2.py, made by protoc from
traces/schema/chakra_et.proto. Prints one JSON summary: the metadata's version
and attribute names, node counts by type, dependency counts, the sum of
durations, the attrs each op node carries, and every node's id and deps."""

import json
import sys

sys.path.insert(0, sys.argv[1])
import chakra_et_pb2 as et  # noqa: E402


def varint(data, at):
    shift = value = 0
    while True:
        if at >= len(data):
            raise ValueError(f"a length varint runs past the end at byte {at}")
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, at
        shift += 7


def messages(data):
    at = 0
    while at < len(data):
        n, at = varint(data, at)
        if at + n > len(data):
            raise ValueError(f"a message of {n} bytes at byte {at} runs past the end")
        yield data[at:at + n]
        at += n


def main():
    data = open(sys.argv[2], "rb").read()
    stream = messages(data)
    meta = et.GlobalMetadata()
    meta.ParseFromString(next(stream))
    types = {}
    nodes = []
    durations = 0
    op_attrs = set()
    comm = []
    for raw in stream:
        node = et.Node()
        node.ParseFromString(raw)
        name = et.NodeType.Name(node.type)
        types[name] = types.get(name, 0) + 1
        durations += node.duration_micros
        attrs = {a.name: a for a in node.attr}
        if node.type in (et.COMP_NODE, et.COMM_COLL_NODE, et.COMM_SEND_NODE, et.COMM_RECV_NODE):
            op_attrs.update(attrs)
        if node.type == et.COMM_COLL_NODE:
            comm.append([et.CollectiveCommType.Name(attrs["comm_type"].int64_val),
                         attrs["comm_size"].int64_val])
        size = attrs["tensor_size"].uint64_val if "tensor_size" in attrs else None
        nodes.append({"id": node.id, "type": name, "data_deps": list(node.data_deps),
                      "ctrl_deps": list(node.ctrl_deps), "tensor_size": size,
                      "shapes": node.inputs.shapes})
    tensors = {a.name: a for a in meta.attr}
    print(json.dumps({
        "version": meta.version,
        "metadata_attrs": sorted(tensors),
        "tensors": len(tensors["ssdtrain.tensor.bytes"].int64_list.values),
        "types": types,
        "data_deps": sum(len(n["data_deps"]) for n in nodes),
        "ctrl_deps": sum(len(n["ctrl_deps"]) for n in nodes),
        "duration_micros": durations,
        "op_attrs": sorted(op_attrs),
        "collectives": comm,
        "nodes": nodes,
    }))


main()
