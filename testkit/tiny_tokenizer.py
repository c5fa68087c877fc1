"""A tiny word-level tokenizer that AutoTokenizer loads offline: the stand-in model's, for
the bench tests and the lab. Vocabulary: the test engine's words and w0..w49999, large enough
that random-ids prompts do not share prefixes (a vocabulary of 512 made about 7 % of the
prompt tokens of a steady run cache hits, as the H200 testbed's 2048 tokens did).

Run with an interpreter that has transformers: python tiny_tokenizer.py <directory>.
"""

import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

words = ["[UNK]", "[PAD]"] + ["Paris", "is", "the", "capital", "of", "France", ".", "It",
         "has", "a"] + [f"w{i}" for i in range(50000)]  # fmt: skip
vocab = {w: i for i, w in enumerate(words)}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece()  # joins word tokens with spaces
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")
fast.save_pretrained(sys.argv[1])
