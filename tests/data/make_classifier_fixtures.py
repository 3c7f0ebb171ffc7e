"""Makes the fine-tuning fixtures under tests/data/classifier/ from ../shared/data/corpora.

Run by hand from anywhere (never by the tests: CI has no ../shared):

    .venv/bin/python tests/data/make_classifier_fixtures.py [--corpora DIR] [--out DIR]

The output is deterministic (fixed seed, corpora read in a fixed order). What it writes:

* source/{train,dev,test}.tsv, source/test_labels.tsv: "which corpus is this sentence from"
  (austen / bible / linux), balanced, 360 / 120 / 60 rows. train/dev: header `sentence<TAB>label`;
  test: header `id<TAB>sentence` without labels (GLUE test style); test_labels.tsv: `id<TAB>label`.
* pairs/{train,dev,test}.tsv, pairs/test_labels.tsv: "does sentence B follow sentence A in the same
  document" in the MRPC layout (label 1: the next line of the document; 0: a random sentence from
  another document of the same corpus), half Austen/Melville, half Linux docs, 50/50 labels,
  360 / 120 / 60 rows. test.tsv has MRPC's test header; test_labels.tsv: `index<TAB>label`.
* source_small.csv, source_small.jsonl: 40 rows of source/train.tsv (14 austen, 13 bible,
  13 linux, in train.tsv's order) as standard CSV `text,label` and as JSON lines.

Every corpus's documents are shuffled once and divided into train / dev / test documents, and
both tasks draw each split only from that split's documents, so no document gives sentences to
two splits. Sentences kept: 6 to 40 whitespace-separated words; no tab or other control
character or line separator; no leading or trailing space; not a fragment of the splitter's
known flaw (a line ending in "Mr." and the like, and the line after it); occurring only once in
the three corpora (repeated boilerplate and verses would otherwise tie documents of different
splits). Within a task no sentence is used twice. Pair ids are "<corpus>-<document>-<line>",
0-based positions in the corpus file's documents.
"""

import argparse
import csv
import json
import os
import random
import re
import sys
import unicodedata
from collections import Counter

SEED = 20240611
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CORPORA = os.path.join(os.path.dirname(REPO), "shared", "data", "corpora")
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "classifier")

SOURCE_CORPORA = (("austen", "austen_moby.txt"), ("bible", "web_bible_books.txt"),
                  ("linux", "linux_doc_en.txt"))
PAIR_CORPORA = (("austen", "austen_moby.txt"), ("linux", "linux_doc_en.txt"))
SPLITS = ("train", "dev", "test")
SIZES = {"train": 360, "dev": 120, "test": 60}
# Fractions of each corpus's documents that go to dev and test (the rest to train).
DOC_FRACTIONS = {"dev": 0.2, "test": 0.15}
MIN_WORDS, MAX_WORDS = 6, 40
SMALL_SIZE = 40
SMALL_WITH_QUOTES = 6  # rows of source_small with both a comma and a '"'

_ABBREVIATION_END = re.compile(r"(?:^|\W)(?:Mr|Mrs|Ms|Dr|St|Messrs|viz|vs|e\.g|i\.e|etc)\.$")


def read_documents(path):
  """The corpus as a list of documents, each a list of lines (sentences)."""
  with open(path, encoding="utf-8", newline="\n") as f:
    text = f.read()
  docs = []
  for block in text.split("\n\n"):
    lines = block.split("\n")
    while lines and not lines[0].strip():
      lines.pop(0)
    while lines and not lines[-1].strip():
      lines.pop()
    if lines:
      docs.append(lines)
  return docs


def _clean_chars(line):
  return not any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in line)


def eligible_flags(lines):
  """For each line of a document, whether it may be used as a fixture sentence."""
  flags = []
  broken_before = False
  for line in lines:
    stripped = line.strip()
    broken_here = bool(_ABBREVIATION_END.search(stripped))
    ok = (stripped == line and _clean_chars(line) and not broken_here and not broken_before
          and MIN_WORDS <= len(line.split()) <= MAX_WORDS)
    flags.append(ok)
    broken_before = broken_here
  return flags


def split_documents(docs, rng):
  """{split: [document index]} from one shuffle of the documents."""
  order = list(range(len(docs)))
  rng.shuffle(order)
  n_test = max(2, round(len(docs) * DOC_FRACTIONS["test"]))
  n_dev = max(2, round(len(docs) * DOC_FRACTIONS["dev"]))
  return {"test": sorted(order[:n_test]), "dev": sorted(order[n_test:n_test + n_dev]),
          "train": sorted(order[n_test + n_dev:])}


class Corpus:

  def __init__(self, name, path, rng):
    self.name = name
    self.docs = read_documents(path)
    self.flags = [eligible_flags(lines) for lines in self.docs]
    self.split_docs = split_documents(self.docs, rng)

  def keep_unique(self, counts):
    """Makes ineligible every line whose text occurs more than once (counts over all corpora)."""
    for lines, flags in zip(self.docs, self.flags):
      for i, line in enumerate(lines):
        if counts[line] > 1:
          flags[i] = False

  def sentences(self, split):
    """(doc, line) of every eligible sentence in the split's documents."""
    return [(d, i) for d in self.split_docs[split] for i, ok in enumerate(self.flags[d]) if ok]

  def text(self, doc, line):
    return self.docs[doc][line]

  def sentence_id(self, doc, line):
    return f"{self.name}-{doc:04d}-{line:04d}"


def sample_sentences(corpus, split, count, rng, used):
  """`count` distinct, unused sentences of the split's documents, as (doc, line, text)."""
  candidates = corpus.sentences(split)
  rng.shuffle(candidates)
  picked = []
  for doc, line in candidates:
    text = corpus.text(doc, line)
    if text in used:
      continue
    used.add(text)
    picked.append((doc, line, text))
    if len(picked) == count:
      return picked
  raise RuntimeError(f"{corpus.name} {split}: only {len(picked)} sentences, need {count}")


def make_source(corpora, rng):
  """{split: [(text, label)]}, balanced and shuffled."""
  used = set()
  out = {}
  for split in SPLITS:
    per_label = SIZES[split] // len(SOURCE_CORPORA)
    rows = []
    for label, _ in SOURCE_CORPORA:
      rows += [(text, label) for _, _, text in
               sample_sentences(corpora[label], split, per_label, rng, used)]
    rng.shuffle(rows)
    out[split] = rows
  return out


def make_pairs(corpora, rng):
  """{split: [(label, id1, id2, text_a, text_b)]}: half per corpus, half positive, shuffled."""
  used = set()
  out = {}
  for split in SPLITS:
    per_corpus = SIZES[split] // len(PAIR_CORPORA)
    n_pos = per_corpus // 2
    rows = []
    for name, _ in PAIR_CORPORA:
      corpus = corpora[name]
      # A is always a sentence whose next line is eligible, for positives and negatives alike.
      starts = [(d, i) for d, i in corpus.sentences(split)
                if i + 1 < len(corpus.flags[d]) and corpus.flags[d][i + 1]]
      rng.shuffle(starts)
      pool = corpus.sentences(split)
      rng.shuffle(pool)
      labels = ["1"] * n_pos + ["0"] * (per_corpus - n_pos)
      made = []
      for d, i in starts:
        if len(made) == len(labels):
          break
        label = labels[len(made)]
        a = corpus.text(d, i)
        if a in used:
          continue
        if label == "1":
          bd, bi = d, i + 1
        else:
          bd, bi = next(((bd, bi) for bd, bi in pool if bd != d
                         and corpus.text(bd, bi) not in used and corpus.text(bd, bi) != a),
                        (None, None))
          if bd is None:
            raise RuntimeError(f"{name} {split}: no sentence left for a negative pair")
        b = corpus.text(bd, bi)
        if b in used or b == a:
          continue
        used.update((a, b))
        made.append((label, corpus.sentence_id(d, i), corpus.sentence_id(bd, bi), a, b))
      if len(made) != len(labels):
        raise RuntimeError(f"{name} {split}: only {len(made)} pairs, need {len(labels)}")
      rows += made
    rng.shuffle(rows)
    out[split] = rows
  return out


def pick_small(train_rows):
  """SMALL_SIZE rows of the source train set in its order: some with ',' and '"', balanced."""
  labels = [label for label, _ in SOURCE_CORPORA]
  quota = {label: SMALL_SIZE // len(labels) + (k < SMALL_SIZE % len(labels))
           for k, label in enumerate(labels)}
  chosen = set()
  taken = Counter()
  quoted = [k for k, (text, _) in enumerate(train_rows) if "," in text and '"' in text]
  for k in quoted[:SMALL_WITH_QUOTES]:
    chosen.add(k)
    taken[train_rows[k][1]] += 1
  for k, (_, label) in enumerate(train_rows):
    if k not in chosen and taken[label] < quota[label]:
      chosen.add(k)
      taken[label] += 1
  if taken != Counter(quota):
    raise RuntimeError(f"source_small: got {dict(taken)}, wanted {quota}")
  return [train_rows[k] for k in sorted(chosen)]


def check_cell(text):
  if "\t" in text or "\n" in text or "\r" in text or not text:
    raise ValueError(f"bad TSV cell {text!r}")


def write_tsv(path, header, rows):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8", newline="") as f:
    for row in [header] + rows:
      for cell in row:
        check_cell(cell)
      f.write("\t".join(row) + "\n")
  with open(path, encoding="utf-8", newline="") as f:  # read back as the original reads TSV
    back = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
  if back != [list(header)] + [list(row) for row in rows]:
    raise AssertionError(f"{path} does not read back as written")


def write_csv(path, header, rows):
  with open(path, "w", encoding="utf-8", newline="") as f:
    csv.writer(f, lineterminator="\n").writerows([header] + rows)
  with open(path, encoding="utf-8", newline="") as f:
    back = list(csv.reader(f))
  if back != [list(header)] + [list(row) for row in rows]:
    raise AssertionError(f"{path} does not read back as written")


def write_jsonl(path, keys, rows):
  with open(path, "w", encoding="utf-8", newline="") as f:
    for row in rows:
      f.write(json.dumps(dict(zip(keys, row)), ensure_ascii=False) + "\n")
  with open(path, encoding="utf-8", newline="") as f:
    back = [json.loads(line) for line in f.read().split("\n") if line]
  if back != [dict(zip(keys, row)) for row in rows]:
    raise AssertionError(f"{path} does not read back as written")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--corpora", default=DEFAULT_CORPORA, help="the shared corpora directory")
  parser.add_argument("--out", default=DEFAULT_OUT, help="the output directory")
  args = parser.parse_args(argv)

  rng = random.Random(SEED)
  corpora = {}
  for name, filename in SOURCE_CORPORA:  # fixed order, so the shuffles are reproducible
    corpora[name] = Corpus(name, os.path.join(args.corpora, filename), rng)
    docs = {split: len(d) for split, d in corpora[name].split_docs.items()}
    print(f"{filename}: {len(corpora[name].docs)} documents, split {docs}")
  counts = Counter(line for corpus in corpora.values() for lines in corpus.docs for line in lines)
  for corpus in corpora.values():
    corpus.keep_unique(counts)

  source = make_source(corpora, rng)
  pairs = make_pairs(corpora, rng)
  small = pick_small(source["train"])

  out = args.out
  for split in ("train", "dev"):
    write_tsv(os.path.join(out, "source", f"{split}.tsv"), ("sentence", "label"), source[split])
  write_tsv(os.path.join(out, "source", "test.tsv"), ("id", "sentence"),
            [(str(k), text) for k, (text, _) in enumerate(source["test"])])
  write_tsv(os.path.join(out, "source", "test_labels.tsv"), ("id", "label"),
            [(str(k), label) for k, (_, label) in enumerate(source["test"])])

  for split in ("train", "dev"):
    write_tsv(os.path.join(out, "pairs", f"{split}.tsv"),
              ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"), pairs[split])
  write_tsv(os.path.join(out, "pairs", "test.tsv"),
            ("Index", "#1 ID", "#2 ID", "#1 String", "#2 String"),
            [(str(k), id1, id2, a, b) for k, (_, id1, id2, a, b) in enumerate(pairs["test"])])
  write_tsv(os.path.join(out, "pairs", "test_labels.tsv"), ("index", "label"),
            [(str(k), row[0]) for k, row in enumerate(pairs["test"])])

  write_csv(os.path.join(out, "source_small.csv"), ("text", "label"), small)
  write_jsonl(os.path.join(out, "source_small.jsonl"), ("text", "label"), small)

  for split in SPLITS:
    counts = Counter(label for _, label in source[split])
    print(f"source/{split}: {len(source[split])} rows, {dict(sorted(counts.items()))}")
  for split in SPLITS:
    counts = Counter((row[1].split("-")[0], row[0]) for row in pairs[split])
    labels = Counter(row[0] for row in pairs[split])
    print(f"pairs/{split}: {len(pairs[split])} rows, labels {dict(sorted(labels.items()))}, "
          f"(corpus, label) {dict(sorted(counts.items()))}")
  counts = Counter(label for _, label in small)
  n_quoted = sum("," in text and '"' in text for text, _ in small)
  print(f"source_small: {len(small)} rows, {dict(sorted(counts.items()))}, "
        f"{n_quoted} with a comma and a double quote")
  total = 0
  for root, _, files in os.walk(out):
    for name in sorted(files):
      total += os.path.getsize(os.path.join(root, name))
  print(f"{out}: {total} bytes in all")
  return 0


if __name__ == "__main__":
  sys.exit(main())
