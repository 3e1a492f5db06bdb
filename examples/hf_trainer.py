"""A Hugging Face `Trainer` script, as people write them, with the two lines that put it in the
workbench (marked `# workbench`): a small GPT-2 built from a config (no download) learning to
continue counting sequences.

    python examples/hf_trainer.py
    workbench ab --cmd "python examples/hf_trainer.py" --vs-cmd "python examples/hf_trainer.py --bf16"
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from workbench.integrations.hf import WorkbenchCallback  # workbench

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--bf16", action="store_true")
parser.add_argument("--output-dir", default="hf-output")
args = parser.parse_args()


class Counting(torch.utils.data.Dataset):
    """Sequences that count up from a random start (mod the vocabulary): easy to learn."""

    def __init__(self, size=2048, seq_len=32, vocab=64):
        self.size, self.seq_len, self.vocab = size, seq_len, vocab

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        ids = (torch.arange(self.seq_len) + i * 7) % self.vocab
        return {"input_ids": ids, "labels": ids}


torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=64, n_layer=2, n_head=2))
training = TrainingArguments(
    output_dir=args.output_dir,
    max_steps=args.steps,
    per_device_train_batch_size=16,
    learning_rate=3e-3,
    logging_steps=1,
    report_to=[],
    save_strategy="no",
    bf16=args.bf16,
    use_cpu=not torch.cuda.is_available(),
    disable_tqdm=True,
)
trainer = Trainer(
    model=model, args=training, train_dataset=Counting(), callbacks=[WorkbenchCallback()]
)  # workbench
trainer.train()
