#!/usr/bin/python3
"""Reads TensorBoard event files back, independently of bagua's writer.

    read_tfevents.py DIR   prints one JSON object: {"files": [{"name": ...,
                           "events": [{"wall_time", "step", "file_version"
                           or "scalars": {tag: value}}]}]}, files in name order

The TFRecord framing and its masked CRC32C are checked by hand here, and the
Event protos are decoded with Debian's python3-protobuf from descriptors
written below after TensorFlow's event.proto and summary.proto (field
numbers and types), not from bagua's .proto. Any framing or CRC error exits 1
with a message naming the file and offset.
"""
import json
import os
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# The check value of CRC-32C (RFC 3720, appendix B.4).
assert crc32c(b"123456789") == 0xE3069283


def event_class():
    f = descriptor_pb2.FileDescriptorProto(name="tensorboard_event_reader.proto", package="tensorboard",
                                           syntax="proto3")
    FD = descriptor_pb2.FieldDescriptorProto
    summary = f.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.field.add(name="tag", number=1, type=FD.TYPE_STRING, label=FD.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=FD.TYPE_FLOAT, label=FD.LABEL_OPTIONAL)
    value.field.add(name="node_name", number=7, type=FD.TYPE_STRING, label=FD.LABEL_OPTIONAL)
    summary.field.add(name="value", number=1, type=FD.TYPE_MESSAGE, label=FD.LABEL_REPEATED,
                      type_name=".tensorboard.Summary.Value")
    event = f.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=FD.TYPE_DOUBLE, label=FD.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=FD.TYPE_INT64, label=FD.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=FD.TYPE_STRING, label=FD.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="graph_def", number=4, type=FD.TYPE_BYTES, label=FD.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="summary", number=5, type=FD.TYPE_MESSAGE, label=FD.LABEL_OPTIONAL, oneof_index=0,
                    type_name=".tensorboard.Summary")
    event.oneof_decl.add(name="what")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    descriptor = pool.FindMessageTypeByName("tensorboard.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            sys.exit(f"{path}: offset {pos}: a truncated record header")
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if header_crc != masked(header):
            sys.exit(f"{path}: offset {pos}: the length's CRC does not match")
        body = data[pos + 12:pos + 12 + length]
        if len(body) != length or len(data) < pos + 16 + length:
            sys.exit(f"{path}: offset {pos}: a truncated record")
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if body_crc != masked(body):
            sys.exit(f"{path}: offset {pos}: the data's CRC does not match")
        yield body
        pos += 16 + length


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: read_tfevents.py DIR")
    Event = event_class()
    out = {"files": []}
    for name in sorted(os.listdir(sys.argv[1])):
        if "tfevents" not in name:
            continue
        events = []
        for body in records(os.path.join(sys.argv[1], name)):
            e = Event()
            e.ParseFromString(body)
            item = {"wall_time": e.wall_time, "step": e.step}
            if e.WhichOneof("what") == "file_version":
                item["file_version"] = e.file_version
            elif e.WhichOneof("what") == "summary":
                item["scalars"] = {v.tag: v.simple_value for v in e.summary.value}
            events.append(item)
        out["files"].append({"name": name, "events": events})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
