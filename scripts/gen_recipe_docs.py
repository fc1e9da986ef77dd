#!/usr/bin/env python3
"""Regenerates the key reference in docs/recipes.md from schemas/recipe.schema.json.

    python3 scripts/gen_recipe_docs.py

Rewrites the text between the BEGIN/END REFERENCE markers; the rest of the
page is hand-written. tests/recipe/docs_test.cpp checks that every key of the
schema appears in the page, so a schema change without this step fails CI.
"""
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = json.load(open(os.path.join(ROOT, "schemas", "recipe.schema.json")))
BEGIN, END = "<!-- BEGIN REFERENCE (generated) -->", "<!-- END REFERENCE -->"


def resolve(s):
    while isinstance(s, dict) and "$ref" in s:
        s = SCHEMA["definitions"][s["$ref"].split("/")[-1]]
    return s


def accepts(s):
    s = resolve(s)
    if "x-expected" in s:
        return s["x-expected"]
    if "anyOf" in s:
        return " or ".join(accepts(b) for b in s["anyOf"])
    if "const" in s:
        return f"`{s['const']}`"
    if "enum" in s:
        return ", ".join(f"`{v}`" for v in s["enum"])
    types = s.get("type", [])
    types = [types] if isinstance(types, str) else types
    parts = []
    for t in types:
        text = {"object": "mapping", "array": "list", "boolean": "bool"}.get(t, t)
        if t in ("integer", "number"):
            bounds = []
            for k, op in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<")):
                if k in s:
                    bounds.append(f"{op} {s[k]}")
            if bounds:
                text += " " + ", ".join(bounds)
        if t == "array" and "items" in s:
            text += " of " + accepts(s["items"])
        parts.append(text)
    return " or ".join(parts)


def default_of(prop):
    if "default" in prop:
        return prop["default"]
    r = resolve(prop)
    return r.get("default", "—" if True else None)


def fmt_default(v):
    if v == "—":
        return "—"
    return "`" + json.dumps(v) + "`"


def description(prop):
    return (prop.get("description") or resolve(prop).get("description", "")).replace("|", "\\|")


def rows(path, schema, required=()):
    out = []
    s = resolve(schema)
    for name, prop in s.get("properties", {}).items():
        key = f"{path}.{name}" if path else name
        req = " (required)" if name in required else ""
        out.append(f"| `{key}`{req} | {accepts(prop)} | {fmt_default(default_of(prop))} | {description(prop)} |")
        # A value that is a scalar or a mapping (normalize: false or {mean, std}): the mapping's keys below it.
        branches = [resolve(b) for b in resolve(prop).get("anyOf", [])]
        # An optional small mapping (random_crop: null or {padding}) too; data.cache and the data
        # sources have sections of their own.
        optional_mapping = key != "data.cache" and any("properties" in b and "x-variant-noun" not in b for b in branches)
        if optional_mapping or any(b.get("type") not in ("null", "object") for b in branches):
            for b in branches:
                if "properties" in b:
                    out += rows(key, b, b.get("required", []))
    return out


def table(lines):
    return ["| key | accepts | default | description |", "|---|---|---|---|"] + lines


def variants(path, schema, noun):
    s = resolve(schema)
    out = []
    for entry in s.get("allOf", []):
        then = resolve(entry["then"])
        disc = entry["if"]["required"][0]
        value = entry["if"]["properties"][disc]["const"]
        out.append(f"\n#### {noun} `{value}`\n")
        out += table(rows(path, then, then.get("required", [])))
    return out


def main():
    P = SCHEMA["properties"]
    doc = ["", "### Top level", ""] + table(rows("", SCHEMA, SCHEMA["required"]))
    for section in ("model", "distributed", "train", "checkpoint", "output"):
        doc += ["", f"### `{section}`", ""] + table(rows(section, P[section], resolve(P[section]).get("required", [])))
    doc += ["", "### `data`", ""] + table(rows("data", P["data"], ["train"]))
    doc += ["", "### Data sources: `data.train`, `data.eval`", "",
            "A source's keys depend on its `format`. Keys below are written as `data.train.KEY`; "
            "`data.eval` accepts the same."]
    doc += variants("data.train", SCHEMA["definitions"]["data_source"], "format")
    doc += ["", "### `data.sampler`", ""] + variants("data.sampler", SCHEMA["definitions"]["sampler"], "type")
    doc += ["", "### `data.cache`", ""] + table(rows("data.cache", SCHEMA["definitions"]["cache"]))
    doc += ["", "#### `data.cache.hosts[]`", ""] + table(
        rows("data.cache.hosts[]", SCHEMA["definitions"]["cache"]["properties"]["hosts"]["items"], ["host", "port"]))
    doc += ["", "### `optimizers[]`", "", "Each item's keys depend on its `type`."]
    doc += variants("optimizers[]", SCHEMA["definitions"]["optimizer"], "type")
    doc += ["", "### `scheduler`", ""] + variants("scheduler", SCHEMA["definitions"]["scheduler"], "type")
    doc += ["", "### `algorithm`", "", "Each algorithm accepts `flatten`, `bucket_size` and its own keyword "
            "arguments; any other key is an error that lists the accepted ones."]
    doc += variants("algorithm", SCHEMA["definitions"]["algorithm"], "name")
    path = os.path.join(ROOT, "docs", "recipes.md")
    text = open(path).read()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    text = text[:start] + "\n".join(doc) + "\n\n" + text[end:]
    open(path, "w").write(text)


if __name__ == "__main__":
    main()
