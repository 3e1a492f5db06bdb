"""A Lightning script, as people write them, with the two lines that put it in the workbench
(marked `# workbench`): an MLP on the 8x8 handwritten digits that ship with scikit-learn.

    python examples/lightning_loop.py
    workbench ab --cmd "python examples/lightning_loop.py" \
        --vs-cmd "python examples/lightning_loop.py --precision bf16-mixed"
"""

import argparse

import lightning as L
import torch
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

from workbench.integrations.lightning import WorkbenchCallback  # workbench

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--precision", default="32-true")
args = parser.parse_args()


class Classifier(L.LightningModule):
    def __init__(self, width: int = 256, lr: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, width), torch.nn.ReLU(), torch.nn.Linear(width, 10)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


L.seed_everything(0, verbose=False)
digits = load_digits()
data = TensorDataset(torch.tensor(digits.data, dtype=torch.float32) / 16, torch.tensor(digits.target))
trainer = L.Trainer(
    max_epochs=args.epochs,
    precision=args.precision,
    accelerator="cpu",
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    callbacks=[WorkbenchCallback()],
)  # workbench
trainer.fit(Classifier(), DataLoader(data, batch_size=64, shuffle=True))
