#!/usr/bin/env python3
"""Turn a Hugging Face byte-level BPE tokenizer (tokenizer.json, and tokenizer_config.json for
the special tokens, add_bos and the chat template) into a vocabulary-only GGUF file, written
with llama.cpp's gguf-py the way convert_hf_to_gguf.py writes the tokenizer of a model:

  tokenizer.ggml.model  "gpt2"
  tokenizer.ggml.pre    the pre-tokenizer name llama.cpp knows it by
  tokenizer.ggml.tokens / token_type: every id below the vocabulary size; added tokens that
                        are special (or look it: <|...|>, <｜...｜>) are CONTROL, the other added
                        ones USER_DEFINED, ids with no token "[PAD<id>]" UNUSED
  tokenizer.ggml.merges, bos/eos/... ids, add_bos/add_eos, tokenizer.chat_template
                        (gguf.SpecialVocab, as the converter uses it)

The converter picks the pre-tokenizer name by hashing the ids the transformers tokenizer
gives for a check text; transformers is not needed here: the name comes from the regexes the
tokenizer.json declares (a table of the known ones below), or from --pre.

  PYTHONPATH=<gguf-py> python3 scripts/hf_tokenizer_to_gguf.py DIR OUT.gguf [--pre NAME]
      [--arch llama] [--vocab-size N] [--tiktoken FILE]

--tiktoken reads a tiktoken-style vocabulary instead (what Kimi K2 ships: tiktoken.model,
lines of "base64(token bytes) rank", and tokenizer_config.json's added_tokens_decoder for its
special tokens), as the converter does for Kimi K2 (conversion/deepseek.py): the tokens are
the ranks' byte strings in the byte-level alphabet, the merges are rebuilt by running BPE
over each token's bytes with the lower ranks until two parts are left, the special tokens
are CONTROL and the ids in between "[PAD<id>]" UNUSED. There is no tokenizer.json to name
the pre-tokenizer, so --pre is required (kimi-k2 for Kimi K2).

Exit status 1 with a message on anything it cannot convert.
"""
import argparse
import json
import sys
from pathlib import Path

# The Split regexes of known tokenizer.json files, in order, and llama.cpp's name for them.
LLAMA3_WORDS = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
QWEN2_WORDS = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
               "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
DEEPSEEK3 = ("\\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
             "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
             "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")
KNOWN_PRE = {
    (LLAMA3_WORDS,): "llama-bpe",
    (QWEN2_WORDS,): "qwen2",
    DEEPSEEK3: "deepseek-v3",
}


def fail(msg):
    print(f"hf_tokenizer_to_gguf: {msg}", file=sys.stderr)
    sys.exit(1)


def split_regexes(pre):
    """The Split regexes of a pre_tokenizer, in order; ByteLevel steps without regex are skipped."""
    if pre is None:
        return []
    steps = pre["pretokenizers"] if pre.get("type") == "Sequence" else [pre]
    out = []
    for step in steps:
        kind = step.get("type")
        if kind == "Split":
            pattern = step.get("pattern", {})
            if "Regex" not in pattern or step.get("behavior") != "Isolated" or step.get("invert"):
                fail(f"unsupported Split step {json.dumps(step)[:200]}")
            out.append(pattern["Regex"])
        elif kind == "ByteLevel":
            if step.get("use_regex", True):
                out.append("gpt-2-byte-level")
        else:
            fail(f"unsupported pre-tokenizer step '{kind}'")
    return out


def _byte_level_table():
    table, extra = [], 0
    for b in range(256):
        if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE:
            table.append(chr(b))
        else:
            table.append(chr(256 + extra))
            extra += 1
    return table


BYTE_LEVEL = _byte_level_table()


def byte_level(data):
    """Bytes in GPT-2's byte-level alphabet (printable bytes as themselves, the rest from U+0100)."""
    return "".join(BYTE_LEVEL[b] for b in data)


def rebuild_merges(ranks):
    """The merge list of a tiktoken vocabulary: each token's bytes merged with the lower ranks,
    lowest rank first, until two parts are left; those two are its merge."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) == 1:
            continue
        parts = [token[i:i + 1] for i in range(len(token))]
        while len(parts) > 2:
            best, best_rank = None, None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best_rank is None or r < best_rank):
                    best, best_rank = i, r
            if best is None:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        if len(parts) == 2:
            merges.append(byte_level(parts[0]) + " " + byte_level(parts[1]))
    return merges


def tiktoken_vocab(path, config_dir, gguf):
    import base64
    ranks = {}
    for n, line in enumerate(path.read_text(encoding="ascii").splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2:
            fail(f"{path}:{n}: expected 'base64 rank'")
        ranks[base64.b64decode(fields[0])] = int(fields[1])
    special = {}
    config = config_dir / "tokenizer_config.json"
    if config.is_file():
        for i, t in json.loads(config.read_text(encoding="utf-8")).get("added_tokens_decoder", {}).items():
            special[int(i)] = t["content"]
    by_id = {rank: byte_level(tok) for tok, rank in ranks.items()}
    for i, text in special.items():
        if i in by_id:
            fail(f"special token {text!r} has id {i}, which is a regular token's rank")
        by_id[i] = text
    n = max(by_id) + 1
    tokens, types = [], []
    for i in range(n):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL)
    return tokens, types, rebuild_merges(ranks)


def looks_special(text):
    return (text in ("<pad>", "<mask>") or (text.startswith("<|") and text.endswith("|>")) or
            (text.startswith("<\uff5c") and text.endswith("\uff5c>")))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path, help="directory with tokenizer.json (and tokenizer_config.json)")
    ap.add_argument("out", type=Path, help="GGUF file to write")
    ap.add_argument("--pre", help="tokenizer.ggml.pre (default: from the tokenizer.json regexes)")
    ap.add_argument("--arch", default="llama", help="general.architecture (default llama)")
    ap.add_argument("--vocab-size", type=int, help="number of ids (default: the highest id + 1)")
    ap.add_argument("--tiktoken", type=Path, help="a tiktoken vocabulary file (Kimi K2's tiktoken.model)")
    args = ap.parse_args()
    try:
        import gguf
    except ImportError as e:
        fail(f"gguf-py is not importable ({e}); put llama.cpp's gguf-py on PYTHONPATH")

    if args.tiktoken:
        if not args.pre:
            fail("--tiktoken needs --pre")
        tokens, types, merges = tiktoken_vocab(args.tiktoken, args.dir, gguf)
        write(gguf, args, args.pre, tokens, types, merges)
        return
    path = args.dir / "tokenizer.json"
    try:
        tok = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        fail(f"cannot read {path}: {e}")
    model = tok.get("model", {})
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        fail(f"{path}: model type '{model.get('type')}' is not a BPE vocabulary")
    if model.get("byte_fallback"):
        fail(f"{path}: byte_fallback BPE is a SentencePiece-style vocabulary, not byte-level")

    pre = args.pre
    if pre is None:
        regexes = tuple(split_regexes(tok.get("pre_tokenizer")))
        pre = KNOWN_PRE.get(regexes)
        if pre is None:
            fail(f"{path}: unknown pre-tokenizer regexes {regexes!r}; name it with --pre")

    ids = dict(model["vocab"])
    added = {}
    for t in tok.get("added_tokens", []):
        ids[t["content"]] = t["id"]
        added[t["id"]] = t
    n = args.vocab_size or (max(ids.values()) + 1)
    if max(ids.values()) >= n:
        fail(f"token id {max(ids.values())} is past --vocab-size {n}")
    by_id = {}
    for text, i in ids.items():
        by_id[i] = text

    tokens, types = [], []
    for i in range(n):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        text = by_id[i]
        if i in added:
            if added[i].get("special") or looks_special(text):
                types.append(gguf.TokenType.CONTROL)
            else:
                text = text.replace("\u2581", " ")
                types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(text)

    special = gguf.SpecialVocab(args.dir, load_merges=True, n_vocab=n)
    if not special.merges:
        fail(f"{path}: no merges")
    write(gguf, args, pre, tokens, types, None, special)


def write(gguf, args, pre, tokens, types, merges, special=None):
    writer = gguf.GGUFWriter(str(args.out), args.arch)
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(args.dir.name)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    if merges is not None:
        writer.add_token_merges(merges)
        special = gguf.SpecialVocab(args.dir, load_merges=False, n_vocab=len(tokens))
    special.add_to_gguf(writer, quiet=True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    n_merges = len(merges) if merges is not None else len(special.merges)
    print(f"{args.out}: {len(tokens)} tokens, {n_merges} merges, pre '{pre}', "
          f"special ids {special.special_token_ids}, add {special.add_special_token}")


if __name__ == "__main__":
    main()
