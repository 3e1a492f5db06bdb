"""Source text of small user models that tests write to a file and name by path, as a user would."""

# A model whose second layer's input width is read from an attribute (self.width), which a trace
# cannot see: structured pruning cannot rebuild it, and says so.
RESHAPES_BY_ATTRIBUTE = (
    "from torch import nn\nclass R(nn.Module):\n    def __init__(self):\n"
    "        super().__init__(); self.width = 32\n"
    "        self.a = nn.Linear(64, 32); self.b = nn.Linear(32, 10)\n"
    "    def forward(self, x):\n"
    "        h = self.a(x.flatten(1)).relu()\n"
    "        return self.b(h.reshape(x.shape[0], self.width))  # a width the trace cannot see\n"
    "def build():\n    return R()\n"
)
