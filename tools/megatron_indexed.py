#!/usr/bin/python3
"""Writes Megatron-LM indexed datasets (a .bin/.idx pair), as Megatron-LM's
tools/preprocess_data.py does through megatron/core/datasets/indexed_dataset.py
(IndexedDatasetBuilder.add_document / finalize, _IndexWriter.write). Our own
transcription of the format, for tests and for converting token files; the layout is
described in data/megatron_index.h.

  .bin  every sequence's tokens back to back, in the index dtype, little-endian
  .idx  b"MMIDIDX\\x00\\x00", uint64 version 1, uint8 dtype code, uint64 S (sequences),
        uint64 D (document index entries = documents + 1), int32 lengths[S],
        int64 byte pointers[S] (running sum of length * itemsize from 0),
        int64 document_indices[D] (0, then the sequence count after each document)

Usage:
  megatron_indexed.py --prefix=OUT --dtype=uint16 --docs=DOCS.json
      DOCS.json: a list of documents; a document is a list of token ids (one sequence,
      as preprocess_data.py writes without --split-sentences) or a list of such lists
      (several sequences, as with --split-sentences); [] is an empty document.
  megatron_indexed.py --prefix=OUT --dtype=int32 --from_llmc=SHARD.bin --eos=50256
      one document per EOS-terminated run of the llm.c shard's tokens (EOS kept, as
      preprocess_data.py --append-eod does); a tail without EOS is the last document.
"""
import argparse
import json
import struct
import sys

import numpy as np

HEADER = b"MMIDIDX\x00\x00"
VERSION = 1
# Megatron's DType codes (the numpy type of each).
DTYPE_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5,
               np.float64: 6, np.float32: 7, np.uint16: 8}
DTYPES = {"uint8": np.uint8, "int8": np.int8, "int16": np.int16, "int32": np.int32,
          "int64": np.int64, "float64": np.float64, "float32": np.float32, "uint16": np.uint16}


def optimal_dtype(vocab_size):
    """What Megatron's preprocess_data.py picks: uint16 below 65,500 ids, else int32."""
    return np.uint16 if vocab_size is not None and vocab_size < 65500 else np.int32


def write_indexed_dataset(prefix, documents, dtype=np.uint16, dtype_code=None, version=VERSION):
    """Writes prefix.bin and prefix.idx.

    documents: iterable of documents; each a list of token ids (one sequence) or a list
      of lists (its sequences).
    dtype: numpy token type; dtype_code overrides the code written (for tests of
      unknown codes); version likewise.
    Returns (sequence_lengths, document_indices) as written.
    """
    lengths = []
    document_indices = [0]
    with open(prefix + ".bin", "wb") as data:
        for doc in documents:
            sequences = doc if doc and isinstance(doc[0], (list, tuple)) else [doc]
            for seq in sequences:
                data.write(np.asarray(seq, dtype=dtype).tobytes(order="C"))
                lengths.append(len(seq))
            document_indices.append(len(lengths))
    itemsize = np.dtype(dtype).itemsize
    pointers = []
    offset = 0
    for n in lengths:
        pointers.append(offset)
        offset += n * itemsize
    code = DTYPE_CODES[np.dtype(dtype).type] if dtype_code is None else dtype_code
    with open(prefix + ".idx", "wb") as idx:
        idx.write(HEADER)
        idx.write(struct.pack("<Q", version))
        idx.write(struct.pack("<B", code))
        idx.write(struct.pack("<Q", len(lengths)))
        idx.write(struct.pack("<Q", len(document_indices)))
        idx.write(np.asarray(lengths, dtype=np.int32).tobytes(order="C"))
        idx.write(np.asarray(pointers, dtype=np.int64).tobytes(order="C"))
        idx.write(np.asarray(document_indices, dtype=np.int64).tobytes(order="C"))
    return lengths, document_indices


def read_llmc(path):
    """Tokens of an llm.c shard (256 int32 header: magic 20240520, version, count)."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        assert header[0] == 20240520, f"{path}: not an llm.c shard"
        dtype = np.uint16 if header[1] == 1 else np.uint32
        return np.frombuffer(f.read(), dtype=dtype)[: header[2]].astype(np.int64)


def split_at_eos(tokens, eos):
    """Documents of a token stream joined by EOS (each keeps its EOS)."""
    docs, start = [], 0
    for i in np.flatnonzero(tokens == eos):
        docs.append(tokens[start:i + 1].tolist())
        start = i + 1
    if start < len(tokens):
        docs.append(tokens[start:].tolist())
    return docs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--dtype", default="uint16", choices=sorted(DTYPES))
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--docs", help="JSON list of documents")
    src.add_argument("--from_llmc", help="an llm.c .bin shard to split into documents at --eos")
    ap.add_argument("--eos", type=int, default=50256)
    args = ap.parse_args()
    if args.docs:
        with open(args.docs) as f:
            docs = json.load(f)
    else:
        docs = split_at_eos(read_llmc(args.from_llmc), args.eos)
    lengths, doc_idx = write_indexed_dataset(args.prefix, docs, DTYPES[args.dtype])
    print(f"{args.prefix}.bin/.idx: {len(doc_idx) - 1} documents, {len(lengths)} sequences, "
          f"{sum(lengths)} {args.dtype} tokens")


if __name__ == "__main__":
    sys.exit(main())
