"""Makes the multiple-choice fixtures under tests/data/multiple_choice/.

Run by hand from the repository (never by the tests; it needs transformers and torch):

    .venv/bin/python tests/data/make_multiple_choice_fixtures.py [--out DIR]

The output is deterministic. Two parts:

* A SWAG-like task from real text: the sentences of the token-classification fixtures
  (tests/data/ner/*.txt: Austen and Melville, public domain) of 8 words or more. Each example's
  context is the start of a sentence (its first half of the words; SWAG's sent1 is that start
  without its last two words, sent2 those two words) and its four endings are the sentence's
  true second half and the second halves of three other sentences of the same split, in a
  random order; label is the true one's index. train.csv (the ner train sentences, 160
  examples), val.csv (the dev ones, 60), test.csv (the test ones, 40, without the label column,
  as SWAG's test split), SWAG's file names and CSV layout (video-id, fold-ind, startphrase,
  sent1, sent2, gold-source, ending0..ending3, label); val.jsonl holds the val examples in the
  generic JSONL layout (context = sent1, question = sent2, choices = the endings, label).
* hf_tiny/: a tiny random Hugging Face BertForMultipleChoice (2 layers, hidden 16, the tests'
  64-token vocab, initializer_range 0.5 so that the scores differ visibly), saved with
  save_pretrained (config.json, model.safetensors) beside that vocab.txt, and golden.json: three
  examples of three choices (input_ids, attention_mask, token_type_ids [3, 3, 10], real lengths
  from 3 to 10) and the model's logits [3, 3] on them in eval mode.
"""

import argparse
import csv
import json
import os
import random

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "multiple_choice")
NER = os.path.join(REPO, "tests", "data", "ner")
SEED = 76
SIZES = {"train": 160, "val": 60, "test": 40}
NER_FILES = {"train": "train.txt", "val": "dev.txt", "test": "test.txt"}
CHOICES = 4
HEADER = ["video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source"] + [
    f"ending{i}" for i in range(CHOICES)] + ["label"]
VOCAB_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(5, 64)]


def sentences_of(path):
  """The sentences (lists of words) of a CoNLL file."""
  sentences, words = [], []
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if not line:
        if words:
          sentences.append(words)
        words = []
      elif not line.startswith("-DOCSTART-"):
        words.append(line.split()[0])
  if words:
    sentences.append(words)
  return [s for s in sentences if len(s) >= 8]


def examples_of(sentences, count, rng):
  """SWAG-like examples: (sent1, sent2, endings, label) from `count` of the sentences."""
  chosen = rng.sample(range(len(sentences)), count)
  halves = [(s[:len(s) // 2], s[len(s) // 2:]) for s in sentences]
  examples = []
  for i in chosen:
    start, ending = halves[i]
    others = rng.sample([j for j in range(len(sentences)) if j != i], CHOICES - 1)
    endings = [" ".join(halves[j][1]) for j in others]
    label = rng.randrange(CHOICES)
    endings.insert(label, " ".join(ending))
    examples.append((" ".join(start[:-2]), " ".join(start[-2:]), endings, label))
  return examples


def write_task(out, rng):
  for split, size in SIZES.items():
    examples = examples_of(sentences_of(os.path.join(NER, NER_FILES[split])), size, rng)
    labelled = split != "test"
    header = HEADER if labelled else HEADER[:-1]
    with open(os.path.join(out, f"{split}.csv"), "w", encoding="utf-8", newline="") as f:
      writer = csv.writer(f, lineterminator="\n")
      writer.writerow(header)
      for n, (sent1, sent2, endings, label) in enumerate(examples):
        row = [f"austen-{split}-{n}", str(n), f"{sent1} {sent2}", sent1, sent2, "gold"] + endings
        writer.writerow(row + [str(label)] if labelled else row)
    if split == "val":
      with open(os.path.join(out, "val.jsonl"), "w", encoding="utf-8") as f:
        for sent1, sent2, endings, label in examples:
          f.write(json.dumps(dict(context=sent1, question=sent2, choices=endings, label=label),
                             ensure_ascii=False) + "\n")


def write_hf_tiny(out):
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  torch.manual_seed(SEED)
  config = transformers.BertConfig(vocab_size=len(VOCAB_TOKENS), hidden_size=16,
                                   num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=24, max_position_embeddings=32,
                                   initializer_range=0.5)
  model = transformers.BertForMultipleChoice(config).eval()
  folder = os.path.join(out, "hf_tiny")
  model.save_pretrained(folder, safe_serialization=True)
  with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(VOCAB_TOKENS) + "\n")
  rng = random.Random(SEED)
  ids, mask, types = [], [], []
  for _ in range(3):
    rows = ([], [], [])
    for _ in range(3):
      length = rng.randint(3, 10)
      first = rng.randint(1, length - 2)
      row_ids = [2] + [rng.randrange(5, 64) for _ in range(length - 1)]
      rows[0].append(row_ids + [0] * (10 - length))
      rows[1].append([1] * length + [0] * (10 - length))
      rows[2].append([0] * (first + 1) + [1] * (length - first - 1) + [0] * (10 - length))
    ids.append(rows[0])
    mask.append(rows[1])
    types.append(rows[2])
  with torch.no_grad():
    logits = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                   token_type_ids=torch.tensor(types)).logits
  golden = dict(input_ids=ids, attention_mask=mask, token_type_ids=types,
                logits=[[round(float(v), 7) for v in row] for row in logits.tolist()],
                transformers=transformers.__version__)
  with open(os.path.join(folder, "golden.json"), "w", encoding="utf-8") as f:
    json.dump(golden, f, indent=1)
    f.write("\n")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", default=DEFAULT_OUT)
  args = parser.parse_args()
  os.makedirs(args.out, exist_ok=True)
  write_task(args.out, random.Random(SEED))
  write_hf_tiny(args.out)
  for name in sorted(os.listdir(args.out)):
    print(name)


if __name__ == "__main__":
  main()
