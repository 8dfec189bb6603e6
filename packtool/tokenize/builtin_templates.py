"""The built-in chat templates' text (`BUILTIN`: chatml, llama3, mistral), the reference of
what each renders: assistant content inside `{% generation %}` blocks (the loss), tool calls
and tool results as non-loss text (packtool/docs/TOKENIZATION.md). tokenize.templates compiles
and renders them (trusted: no sandbox) and re-exports these names; native_templates renders the
same text in plain Python, checked equal to these (tests/tokenize/test_tokenize_native.py).
"""
from __future__ import annotations

CHATML = """
{%- for message in messages -%}
{%- if message.role == 'assistant' -%}
{{- '<|im_start|>assistant\n' -}}
{%- if message.tool_calls is defined and message.tool_calls -%}
{%- if message.content is defined and message.content -%}
{% generation %}{{- message.content -}}{% endgeneration %}{{- '\n' -}}
{%- endif -%}
{%- for call in message.tool_calls -%}
{{- '<tool_call>\n' -}}{{- '{"name": ' + call.function.name | tojson + ', "arguments": ' + (call.function.arguments if call.function.arguments is string else call.function.arguments | tojson) + '}' -}}{{- '\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- else -%}
{% generation %}{{- message.content + '<|im_end|>' -}}{% endgeneration %}{{- '\n' -}}
{%- endif -%}
{%- else -%}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""

LLAMA3 = """
{{- bos_token -}}
{%- for message in messages -%}
{%- set role = 'ipython' if message.role == 'tool' else message.role -%}
{{- '<|start_header_id|>' + role + '<|end_header_id|>\n\n' -}}
{%- if message.role == 'assistant' -%}
{%- if message.tool_calls is defined and message.tool_calls -%}
{%- if message.content is defined and message.content -%}
{% generation %}{{- message.content | trim -}}{% endgeneration %}{{- '\n' -}}
{%- endif -%}
{%- for call in message.tool_calls -%}{{- '{"name": ' + call.function.name | tojson + ', "parameters": ' + (call.function.arguments if call.function.arguments is string else call.function.arguments | tojson) + '}' -}}{%- endfor -%}
{{- '<|eot_id|>' -}}
{%- else -%}
{% generation %}{{- message.content | trim + '<|eot_id|>' -}}{% endgeneration %}
{%- endif -%}
{%- else -%}
{{- message.content | trim + '<|eot_id|>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}
"""

# Mistral v0.1 layout `<s>[INST] u [/INST] a</s>[INST] ...`. A system message is folded into
# the first user turn (`[INST] system\n\nuser [/INST]`, as Mistral's later templates do). Turns
# must alternate user/assistant from a user turn, tool results and tool-call turns aside, as
# Mistral's own templates require (v0.1 raises on any other order; v0.3 filters so too). v0.1
# has no tool tokens: a call renders as ` [TOOL_CALLS] [{"name": .., "arguments": ..}]</s>` and
# a result as ` [TOOL_RESULTS] content[/TOOL_RESULTS]` (the v3 layout, as plain text), no loss.
MISTRAL = """
{%- if messages and messages[0].role == 'system' -%}
{%- set system = messages[0].content -%}
{%- set loop_messages = messages[1:] -%}
{%- else -%}
{%- set system = '' -%}
{%- set loop_messages = messages -%}
{%- endif -%}
{%- if system and (not loop_messages or loop_messages[0].role != 'user') -%}
{{- raise_exception('a system message must be followed by a user message') -}}
{%- endif -%}
{%- set ns = namespace(due='user') -%}
{%- for message in loop_messages -%}
{%- if message.role == 'user' or (message.role == 'assistant' and not (message.tool_calls is defined and message.tool_calls)) -%}
{%- if message.role != ns.due -%}
{{- raise_exception('conversation roles must alternate user/assistant/user/assistant/... after the optional system message (tool calls and tool results aside); messages[' ~ (loop.index0 + messages | length - loop_messages | length) ~ '] has role ' ~ message.role ~ ' where ' ~ ns.due ~ ' is due') -}}
{%- endif -%}
{%- set ns.due = 'assistant' if message.role == 'user' else 'user' -%}
{%- endif -%}
{%- endfor -%}
{{- bos_token -}}
{%- for message in loop_messages -%}
{%- if message.role == 'user' -%}
{%- if loop.first and system -%}
{{- '[INST] ' + system + '\n\n' + message.content + ' [/INST]' -}}
{%- else -%}
{{- '[INST] ' + message.content + ' [/INST]' -}}
{%- endif -%}
{%- elif message.role == 'assistant' -%}
{%- if message.content is defined and message.content -%}
{{- ' ' -}}{% generation %}{{- message.content + eos_token -}}{% endgeneration %}
{%- endif -%}
{%- if message.tool_calls is defined and message.tool_calls -%}
{{- ' [TOOL_CALLS] [' -}}
{%- for call in message.tool_calls -%}
{{- '{"name": ' + call.function.name | tojson + ', "arguments": ' + (call.function.arguments if call.function.arguments is string else call.function.arguments | tojson) + '}' -}}{%- if not loop.last -%}{{- ', ' -}}{%- endif -%}
{%- endfor -%}
{{- ']' + eos_token -}}
{%- endif -%}
{%- elif message.role == 'tool' -%}
{{- ' [TOOL_RESULTS] ' + message.content + '[/TOOL_RESULTS]' -}}
{%- else -%}
{{- raise_exception('unsupported role ' + message.role) -}}
{%- endif -%}
{%- endfor -%}
"""

# Tool calls arrive normalized to OpenAI style (messages.normalize_message): message.tool_calls =
# [{"type": "function", "function": {"name": str, "arguments": str (JSON text, kept) | dict}}].
# The call's JSON is written inline rather than by a macro: jinja macro calls cost ~10 us each.
BUILTIN = {"chatml": CHATML, "llama3": LLAMA3, "mistral": MISTRAL}
