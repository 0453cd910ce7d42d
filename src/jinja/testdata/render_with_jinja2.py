#!/usr/bin/env python3
"""The test oracle: renders chat templates with Python's jinja2 the way Hugging Face does.

usage: render_with_jinja2.py TEMPLATES_DIR CONVERSATIONS.json NOW_EPOCH > results.json

Environment as transformers' chat-template rendering sets it up: ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loop controls, the {% generation %} tag, a json.dumps-based tojson,
raise_exception and strftime_now (formatting NOW_EPOCH in UTC, so outputs are reproducible).
Output: {"template file": [{"ok": true, "text": ...} | {"ok": false, "error": ...}, ...]} with
one entry per conversation, in file order.
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %}: renders its body in place."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def main():
    templates_dir, conversations_path, now_epoch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(conversations_path, encoding="utf-8") as f:
        conversations = json.load(f)["conversations"]
    now = datetime.datetime.fromtimestamp(now_epoch, tz=datetime.timezone.utc)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    results = {}
    for name in sorted(os.listdir(templates_dir)):
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(templates_dir, name), encoding="utf-8") as f:
            source = f.read()
        entries = []
        try:
            template = env.from_string(source)
        except Exception as e:  # a template jinja2 cannot compile fails every conversation
            entries = [{"ok": False, "error": "%s: %s" % (type(e).__name__, e)} for _ in conversations]
            results[name] = entries
            continue
        for conversation in conversations:
            try:
                entries.append({"ok": True, "text": template.render(**conversation["context"])})
            except Exception as e:
                entries.append({"ok": False, "error": "%s: %s" % (type(e).__name__, e)})
        results[name] = entries
    json.dump(results, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
