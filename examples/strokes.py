"""A Dataset of your own: 8x8 images of short strokes (horizontal, vertical or either diagonal)
drawn at random places with noise, one sample at a time, labelled by direction. It has a
`classes` attribute, so the workbench knows there are four classes.

    workbench run --model examples/resnet.py:build --set data.name=dataset \
        --set data.factory=examples/strokes.py:build
"""

import torch
from torch.utils.data import Dataset

DIRECTIONS = {"horizontal": (0, 1), "vertical": (1, 0), "diagonal": (1, 1), "anti-diagonal": (1, -1)}


class Strokes(Dataset):
    classes = list(DIRECTIONS)

    def __init__(self, size: int = 1200, seed: int = 0):
        self.size, self.seed = size, seed

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        label = int(torch.randint(0, len(self.classes), (1,), generator=g))
        dy, dx = DIRECTIONS[self.classes[label]]
        img = 0.3 * torch.rand(1, 8, 8, generator=g)
        y, x = (int(v) for v in torch.randint(2, 6, (2,), generator=g))
        for k in range(-2, 3):
            img[0, y + k * dy, x + k * dx] = 1.0
        return img, label


def build(size: int = 1200):
    return Strokes(size)
