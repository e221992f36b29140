#!/usr/bin/env python3
"""Writes tests/chat/expected.json: what real chat templates render for a few
conversations, computed with Jinja2 (Debian: python3-jinja2) the way
transformers' apply_chat_template runs them (sandboxed, trim_blocks,
lstrip_blocks, loopcontrols, raise_exception).

The templates are read where they are, never copied into this repository:
  vocab:NAME     tokenizer.chat_template of ../shared/vocab/NAME (a GGUF)
  llamacpp:NAME  llama.cpp's models/templates/NAME (a Jinja file)
  llamacpp-test:NAME  the template_str of the case NAME in llama.cpp's
                 tests/test-chat-template.cpp (a C++ string literal)
tests/test_chat.c reads the same sources, checks the family tierkv detects,
and compares tkv_chat_render byte for byte with the strings written here.

BOS: the templates that write bos_token are rendered with it and it is cut
from the front of the expected text ("bos" records it), because tierkv leaves
BOS to the tokenizer. The date a template asks strftime_now for is fixed.

usage: scripts/chat_expected.py [--vocab DIR] [--llamacpp DIR] [-o FILE]
"""
import argparse
import json
import os
import struct
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox

CONVERSATIONS = {
    # two turns after a system prompt, the next reply to come
    "sys2": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Hi there!"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
    ],
    # the same without a system prompt
    "nosys2": [
        {"role": "user", "content": "Hi there!"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
    ],
    # a finished exchange (rendered without the generation prompt)
    "sys1done": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Hi there!"},
        {"role": "assistant", "content": "Hello! How can I help?"},
    ],
    # whitespace around contents (templates that trim them)
    "ws2": [
        {"role": "system", "content": " Be brief.\n"},
        {"role": "user", "content": "  Hi\tthere!\n\n"},
        {"role": "assistant", "content": "\nHello!  "},
        {"role": "user", "content": "Again? "},
    ],
    # whitespace, no system prompt (templates that refuse one)
    "ws2nosys": [
        {"role": "user", "content": "  Hi\tthere!\n\n"},
        {"role": "assistant", "content": "\nHello!  "},
        {"role": "user", "content": "Again? "},
    ],
    # a reply that thought first (reasoning templates drop it from history)
    "think2": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Hi there!"},
        {"role": "assistant", "content": "<think>\nGreet back.\n</think>\n\nHello!"},
        {"role": "user", "content": "Tell me a joke."},
    ],
}

# source, family tierkv must detect, bos and eos texts, conversations (with
# the generation prompt unless the name ends in "done")
CASES = [
    ("vocab:ggml-vocab-qwen2.gguf", "chatml", "", "<|im_end|>", ["sys2", "nosys2", "sys1done", "ws2"]),
    ("vocab:ggml-vocab-qwen35.gguf", "chatml", "", "<|im_end|>", ["sys2", "nosys2"]),
    ("vocab:ggml-vocab-phi-3.gguf", "phi-3", "<s>", "<|endoftext|>", ["sys2", "nosys2", "sys1done", "ws2"]),
    ("vocab:ggml-vocab-gemma-4.gguf", "gemma-4", "<bos>", "<eos>", ["sys2", "nosys2", "sys1done", "ws2"]),
    ("llamacpp:Qwen-Qwen2.5-7B-Instruct.jinja", "chatml", "", "<|im_end|>",
     ["sys2", "nosys2", "sys1done", "ws2"]),
    ("llamacpp:Qwen-Qwen3-0.6B.jinja", "chatml", "", "<|im_end|>",
     ["sys2", "nosys2", "sys1done", "ws2", "think2"]),
    ("llamacpp:google-gemma-2-2b-it.jinja", "gemma", "<bos>", "<eos>", ["nosys2"]),
    ("llamacpp:microsoft-Phi-3.5-mini-instruct.jinja", "phi-3", "<s>", "<|endoftext|>",
     ["sys2", "nosys2", "sys1done", "ws2"]),
    ("llamacpp:meta-llama-Llama-3.1-8B-Instruct.jinja", "llama-3", "<|begin_of_text|>", "<|eot_id|>",
     ["sys2", "nosys2", "sys1done", "ws2"]),
    ("llamacpp:meta-llama-Llama-3.2-3B-Instruct.jinja", "llama-3", "<|begin_of_text|>", "<|eot_id|>",
     ["sys2", "nosys2", "sys1done"]),
    ("llamacpp:meta-llama-Llama-3.3-70B-Instruct.jinja", "llama-3", "<|begin_of_text|>", "<|eot_id|>",
     ["sys2", "nosys2"]),
    ("llamacpp:mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral-nemo", "<s>", "</s>",
     ["sys2", "nosys2", "sys1done", "ws2"]),
    ("llamacpp:Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral-v7", "<s>", "</s>",
     ["sys2", "sys1done", "ws2"]),
    ("llamacpp:unsloth-mistral-Devstral-Small-2507.jinja", "mistral-v7", "<s>", "</s>",
     ["sys2", "sys1done", "ws2"]),
    ("llamacpp-test:Llama-3", "llama-3", "<|begin_of_text|>", "<|eot_id|>", ["sys2", "nosys2", "ws2"]),
    ("llamacpp-test:google/gemma-7b-it", "gemma", "<bos>", "<eos>", ["nosys2", "ws2nosys"]),
    ("llamacpp-test:Phi-3-mini", "phi-3", "<s>", "<|endoftext|>", ["sys2", "nosys2", "sys1done"]),
    ("llamacpp-test:Phi-3-small", "phi-3", "<s>", "<|endoftext|>", ["sys2", "nosys2", "sys1done"]),
    ("llamacpp-test:Phi-3-medium", "phi-3", "<s>", "<|endoftext|>", ["sys2", "nosys2", "sys1done"]),
    ("llamacpp-test:Phi-3-vision", "phi-3", "<s>", "<|endoftext|>", ["sys2", "nosys2"]),
    ("llamacpp-test:phi-4", "phi-4", "", "<|im_end|>", ["sys2", "nosys2", "sys1done"]),
    ("llamacpp-test:mistralai/Mistral-7B-Instruct-v0.2 (NOTE: Old pre-v1 without a system prompt)", "mistral",
     "<s>", "</s>", ["nosys2", "ws2nosys"]),
    ("llamacpp-test:mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template with a system prompt)", "mistral",
     "<s>", "</s>", ["sys2", "nosys2", "sys1done"]),
    ("llamacpp-test:mistralai/Mistral-Large-Instruct-2411 (mistralai 'v7' template)", "mistral-v7",
     "<s>", "</s>", ["sys2", "nosys2", "sys1done"]),
]


def gguf_chat_template(path):
    """tokenizer.chat_template of a GGUF file, or None."""
    with open(path, "rb") as f:
        b = f.read()
    if b[:4] != b"GGUF":
        raise ValueError(path + ": not a GGUF file")
    o = 8
    _, n_kv = struct.unpack_from("<QQ", b, o)
    o += 16
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def string():
        nonlocal o
        (n,) = struct.unpack_from("<Q", b, o)
        o += 8 + n
        return b[o - n:o]

    def skip(t):
        nonlocal o
        if t == 8:
            string()
        elif t == 9:
            et, n = struct.unpack_from("<IQ", b, o)
            o += 12
            for _ in range(n):
                skip(et)
        else:
            o += sizes[t]

    for _ in range(n_kv):
        key = string().decode()
        (t,) = struct.unpack_from("<I", b, o)
        o += 4
        if key == "tokenizer.chat_template" and t == 8:
            return string().decode()
        skip(t)
    return None


def cpp_test_template(path, name):
    """The template_str literal of the test case named name in a
    test-chat-template.cpp (one C++ string literal, maybe in U8C(...))."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    at = text.index('/* .name= */ "%s",' % name.replace('"', '\\"'))
    at = text.index("/* .template_str= */ ", at) + len("/* .template_str= */ ")
    if text.startswith("U8C(", at):
        at += 4
    if text[at] != '"':
        raise ValueError("%s: template of %s is not a string literal" % (path, name))
    out, i = [], at + 1
    esc = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}
    while text[i] != '"':
        if text[i] == "\\":
            out.append(esc[text[i + 1]])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def template_text(source, vocab_dir, llamacpp_dir):
    kind, name = source.split(":", 1)
    if kind == "vocab":
        return gguf_chat_template(os.path.join(vocab_dir, name))
    if kind == "llamacpp-test":
        return cpp_test_template(os.path.join(llamacpp_dir, "..", "..", "tests", "test-chat-template.cpp"), name)
    with open(os.path.join(llamacpp_dir, name), encoding="utf-8") as f:
        return f.read()


def render(text, messages, add_generation_prompt, bos, eos):
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: "2026-01-01"
    # Llama 3.2 takes today's date from strftime_now; tierkv writes the
    # template's own fallback date, so the expected text uses it too
    if "Today Date" in text:
        env.globals.pop("strftime_now")
    out = env.from_string(text).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                       bos_token=bos, eos_token=eos)
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", default=os.path.join(here, "..", "..", "shared", "vocab"))
    ap.add_argument("--llamacpp", default=os.path.join(here, "..", "..", "llamacpp", "models", "templates"))
    ap.add_argument("-o", default=os.path.join(here, "..", "tests", "chat", "expected.json"))
    args = ap.parse_args()

    cases = []
    for source, family, bos, eos, convs in CASES:
        text = template_text(source, args.vocab, args.llamacpp)
        if text is None:
            sys.exit("%s: no chat template" % source)
        for conv in convs:
            gen = not conv.endswith("done")
            out = render(text, CONVERSATIONS[conv], gen, bos, eos)
            bos_written = bool(bos) and out.startswith(bos)
            if bos_written:
                out = out[len(bos):]
            cases.append({"source": source, "family": family, "bos": bos, "eos": eos,
                          "bos_written": bos_written, "conversation": conv,
                          "add_generation_prompt": gen, "expected": out})
    doc = {
        "generator": "scripts/chat_expected.py (jinja2 %s)" % jinja2.__version__,
        "conversations": CONVERSATIONS,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(args.o), exist_ok=True)
    with open(args.o, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("%s: %d cases" % (args.o, len(cases)))


if __name__ == "__main__":
    main()
