"""The 25,314 chats behind BENCHMARKS.md's training tables, as one `messages` JSON Lines file.

GSM8K train (question -> user, answer -> assistant), GPTeacher codegen / roleplay /
toolformer (instruction + input -> user, response -> assistant) and the Taskmaster-4 coffee
dialogs (already `messages`, tool calls included), in that order, from ../shared/data.
Then: `packtool pack chats.jsonl --tokenizer gpt2/tokenizer.json --chat-template chatml
--max-tokens 8192 --algorithm bfd --fp8 blockwise -o DIR`.

    python bench/fp8_chats.py --shared ../shared/data --out chats.jsonl
"""
from __future__ import annotations

import argparse
import gzip
import json
import os


def chats(shared: str):
    with open(os.path.join(shared, "gsm8k", "train.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            yield [{"role": "user", "content": r["question"]},
                   {"role": "assistant", "content": r["answer"]}]
    for name in ("codegen-instruct.json", "roleplay-simple-deduped-roleplay-instruct.json",
                 "toolformer-dedupe-only-dataset.json"):
        with open(os.path.join(shared, "gpteacher", name)) as f:
            for r in json.load(f):
                prompt = r["instruction"] + (f"\n\n{r['input']}" if r.get("input") else "")
                yield [{"role": "user", "content": prompt},
                       {"role": "assistant", "content": r["response"]}]
    with gzip.open(os.path.join(shared, "taskmaster4", "tm4_coffee_dialogs_chat.jsonl.gz"),
                   "rt") as f:
        for line in f:
            yield json.loads(line)["messages"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                     "shared", "data"))
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    n = 0
    with open(a.out, "w") as f:
        for m in chats(a.shared):
            f.write(json.dumps({"messages": m}) + "\n")
            n += 1
    print(f"{n} chats -> {a.out}")


if __name__ == "__main__":
    main()
