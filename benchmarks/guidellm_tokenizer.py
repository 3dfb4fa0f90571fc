"""Write the offline tokenizer guidellm needs to run against ``llmsim serve`` (nothing downloaded).

guidellm counts prompt and output tokens with a Hugging Face tokenizer, and its synthetic prompts are
Faker's words; a word-level tokenizer over those words (plus an unknown token), saved with
transformers' ``save_pretrained``, is enough: ``--tokenizer kind=hf_auto,model=DIR`` with
``HF_HUB_OFFLINE=1``. Used to make the guidellm fixtures (see ``guidellm_fixture.py``).

    python benchmarks/guidellm_tokenizer.py DIR
"""

from __future__ import annotations

import sys

from faker.providers.lorem.en_US import Provider as Lorem
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast


def main() -> None:
    words = sorted({word.lower() for word in Lorem.word_list})
    vocab = {"[UNK]": 0, **{word: i + 1 for i, word in enumerate(words)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]").save_pretrained(sys.argv[1])


if __name__ == "__main__":
    main()
