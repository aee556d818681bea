#!/usr/bin/env node
// Writes the golden GPT-2 token ids that tests/data/gpt2_tokenizer_test.cc checks
// data/gpt2_tokenizer.cc against (tests/data/testdata/gpt2_goldens.json).
//
// The ids come from an independent implementation: js-tiktoken's r50k_base (GPT-2's
// vocabulary and merges), cross-checked against gpt-3-encoder (a port of OpenAI's
// encoder.py). Usage (needs the npm registry once):
//
//   npm install --prefix /tmp/goldens js-tiktoken@1.0.21 gpt-3-encoder@1.1.4
//   NODE_PATH=/tmp/goldens/node_modules node tools/make_tokenizer_goldens.js \
//       data_cache/nlp-corpus > tests/data/testdata/gpt2_goldens.json
//
// Output: {"cases": [{"name", "text", "ids"}...], "corpus": [{"file", "documents",
// "tokens", "fnv1a"}...]}. For "corpus", each nlp-corpus file (a JSON array of strings)
// is encoded string by string with EOS (50256) after each, as `multiscreen prepare`
// does; "fnv1a" is the 32-bit FNV-1a hash over the ids taken as whole words:
// h = 2166136261; for id: h = ((h ^ id) * 16777619) mod 2^32. The corpus text itself
// is not committed.
//
// JavaScript's \s differs from Unicode White_Space (it adds U+FEFF and omits U+0085);
// the C++ tokenizer follows White_Space, as the Python/Rust references do, so no case
// below puts those two characters next to spaces or punctuation.
'use strict';
const fs = require('fs');
const path = require('path');
const { getEncoding } = require('js-tiktoken');
const gpt3 = require('gpt-3-encoder');

const enc = getEncoding('r50k_base');
const encode = (text) => enc.encode(text, [], []);  // special tokens are plain text

function longText() {
  // About 40 KB of mixed prose, numbers, code, whitespace and non-Latin scripts.
  const parts = [];
  for (let i = 0; i < 400; i++) {
    parts.push(`Paragraph ${i}: the quick brown fox (${i * 7919 % 1000}) jumps over ` +
               `the lazy dog's back; it's ${i % 3 === 0 ? 'NOT' : 'not'} the ${i}th time.`);
    if (i % 5 === 0) parts.push('\n\n');
    if (i % 7 === 0) parts.push('    indented = [x ** 2 for x in range(10)]\n');
    if (i % 11 === 0) parts.push('Ünïcödé ñ 你好 🙂 — “quotes” … ');
    if (i % 13 === 0) parts.push('\t\t  \n');
  }
  return parts.join(' ');
}

const cases = [
  ['empty', ''],
  ['hello', 'Hello, world!'],
  ['single_space', ' '],
  ['single_newline', '\n'],
  ['contractions', "I'm sure you're right: they've said it's what we'd do, and I'll go."],
  ['contractions_upper', "DON'T SHOUT, IT'S LOUD; WE'RE HERE. I'M OK, YOU'LL SEE, THEY'D KNOW"],
  ['contractions_odd', "'s'''t 'tis rock 'n' roll o'clock x'sy don't1234's ''re"],
  ['curly_apostrophe', 'it’s what they’ve done ‘quoted’'],
  ['digits', '12345678901234567890 0 007 3.14159 1,000,000 2024-05-20 1e-8 0x1F'],
  ['digits_other', '٣٤٥ ۱۲۳ १२३ Ⅻ ½ ² ³ ⁴ ①②'],
  ['mixed_alnum', 'HelloWorld123abc abc123def R2D2 C3PO mp3 4K'],
  ['space_runs', 'a  b   c    d     e'],
  ['leading_trailing', '   leading and trailing   '],
  ['tabs', '\t\ttabs\tand\t \tspaces\t'],
  ['newlines', 'line1\nline2\n\nline3\n\n\nline4\n'],
  ['crlf', 'windows\r\nline endings\r\n\r\nend'],
  ['blank_lines_with_spaces', '  \n  \n\t\n   word  \n  '],
  ['only_spaces', '          '],
  ['spaces_then_newline', 'a   \n   b'],
  ['unicode_spaces', 'no\u00a0break\u00a0 space\u3000ideographic\u2003em\u2028ls\u2029ps'],
  ['punctuation', 'Hello!!! ...??? (parens) [brackets] {braces} <tags> @#$%^&*_+=|\\~`'],
  ['punctuation_runs', '--->>> ==== **** ;;; ::: !!!??? ... ,,, ___ /// \\\\\\'],
  ['quotes', '"double" \'single\' «guillemets» „low“ 「kagi」'],
  ['accents', 'café naïve résumé Ångström Zürich señor façade coöperate'],
  ['accents_decomposed', 'cafe\u0301 nai\u0308ve A\u030angstro\u0308m'],
  ['cjk_chinese', '你好，世界！这是一个测试。'],
  ['cjk_japanese', '日本語のテキスト、カタカナとひらがな。東京タワー'],
  ['korean', '한국어 텍스트 안녕하세요 세계'],
  ['emoji', '👍🏽 🇺🇸 👨‍👩‍👧‍👦 😀😃😄 I ❤️ NY ✨🎉'],
  ['cyrillic_greek', 'Привет, мир! Ελληνικά γράμματα αβγ ΑΒΓ'],
  ['arabic_hebrew', 'مرحبا بالعالم שלום עולם'],
  ['devanagari_thai', 'नमस्ते दुनिया สวัสดีชาวโลก'],
  ['math_symbols', '∑ᵢ xᵢ² ≤ ∞ ∀ε>0 ∃δ → ∫₀¹ f(x)dx ≈ π'],
  ['code', 'def f(x):\n    return x ** 2  # comment\n\nif __name__ == "__main__":\n    print(f(3))\n'],
  ['json', '{"text": "value", "n": [1, 2, 3], "nested": {"a": null}}'],
  ['url_email', 'https://example.com/path?q=1&r=two#frag user.name+tag@example.org'],
  ['endoftext_as_text', 'before<|endoftext|>after <|endoftext|>'],
  ['repeated_letters', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'],
  ['long_digit_run', '9876543210'.repeat(100)],
  ['long_punct_run', '=-'.repeat(600)],
  ['long_space_run', ' '.repeat(1000) + 'word' + '\n'.repeat(300) + 'end'],
  ['long_word', 'Pneumonoultramicroscopicsilicovolcanoconiosis'.repeat(30)],
  ['control_chars', 'bell\u0007 esc\u001b[0m nul\u0000 del\u007f'],
  ['long_mixed', longText()],
];

const out = { cases: [], corpus: [] };
let disagreements = 0;
for (const [name, text] of cases) {
  const ids = encode(text);
  if (enc.decode(ids) !== text) throw new Error(`${name}: js-tiktoken does not round-trip`);
  const other = gpt3.encode(text);
  if (JSON.stringify(other) !== JSON.stringify(ids)) {
    disagreements++;
    process.stderr.write(`note: gpt-3-encoder disagrees on case '${name}'\n`);
  }
  out.cases.push({ name, text, ids });
}

const corpusDir = process.argv[2];
if (corpusDir) {
  const files = fs.readdirSync(corpusDir).filter((f) => f.endsWith('.json')).sort();
  for (const file of files) {
    const docs = JSON.parse(fs.readFileSync(path.join(corpusDir, file), 'utf8'));
    let h = 2166136261 >>> 0;
    let tokens = 0;
    const mix = (id) => { h = Math.imul((h ^ id) >>> 0, 16777619) >>> 0; tokens++; };
    for (const doc of docs) {
      for (const id of encode(doc)) mix(id);
      mix(50256);
    }
    out.corpus.push({ file, documents: docs.length, tokens, fnv1a: h });
  }
}
process.stderr.write(`${out.cases.length} cases, ${out.corpus.length} corpus files, ` +
                     `${disagreements} disagreements with gpt-3-encoder\n`);
process.stdout.write(JSON.stringify(out, null, 1) + '\n');
