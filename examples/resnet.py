"""A residual CNN: basic blocks (two 3x3 convolutions with BatchNorm) and skip connections, a 1x1
projection where a stage changes width or resolution, global pooling and a classifier. The blocks
live in a module of their own (`blocks.py`, next to this file), which an export carries along.

    workbench run --model examples/resnet.py:build --set data.name=synthetic_images
"""

from torch import nn

from blocks import BasicBlock


class ResNet(nn.Module):
    def __init__(self, in_channels: int, num_classes: int, widths=(16, 32, 64), blocks: int = 1):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        layers, channels = [], widths[0]
        for i, width in enumerate(widths):
            for j in range(blocks):
                layers.append(BasicBlock(channels, width, stride=2 if i and not j else 1))
                channels = width
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x):
        return self.fc(self.pool(self.layers(self.stem(x))).flatten(1))


def build(in_channels, num_classes, width: int = 16, blocks: int = 1):
    return ResNet(in_channels, num_classes, (width, 2 * width, 4 * width), blocks)
