"""One row of every input shape packtool detects (docs/TOKENIZATION.md, Shapes), for the tests
that try shapes side by side."""

SHAPES = {
    "tokens": {"input_ids": [464, 3290, 318]},
    "chat": {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
    "sharegpt": {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
    "alpaca": {"instruction": "say hi", "output": "hi"},
    "prompt_completion": {"prompt": "one two", "completion": " three"},
    "text": {"text": "a plain document"},
    "fields": {"question": "What is 2+2?", "answer": "4"},
}
