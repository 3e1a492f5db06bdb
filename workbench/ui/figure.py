"""LiveFigure: plotly's FigureWidget, drawn on a busy machine too.

    fig = LiveFigure()          # the same Python API as go.FigureWidget

Why not plotly's own: its widget's front-end module is its whole bundle (about 5 MB, plotly.js
inside), sent with every figure and evaluated once per figure while the page sets up the figure's
model, and the widget library gives that set-up 2 s: on a busy machine it takes longer, and the
figure stays blank ("[anywidget] Failed to initialize model." in the browser's console).

Here a figure's module is a few lines that set up at once. plotly's bundle travels once per kernel,
in one shared widget (PlotlyCode), and is evaluated once per page; each figure then hands its model
to plotly's own widget code and draws with it. Evaluating the bundle holds the page for seconds in
one piece (2.0 s on a quiet 2-core machine, 10 s with the page 5x slower, measured), and a figure
whose model is being set up meanwhile misses its 2 s as well and then drops every message: so the
page evaluates it only once every figure its kernels announced (PlotlyCode.figures) has set up and
none came for a moment, and evaluates it at once in that moment, as a function rather than an
imported module: an import fetches and parses first, and a figure whose model arrived in between
was caught by the evaluation that followed (once on CI, 1 of 8). A figure that comes later is set
up after that piece, within its 2 s.

The messages a figure received before plotly's code was there are replayed to it in order, minus
those a newer copy of the figure's whole data or layout already holds (ui.charts.publish sends one
now and then). The charts of a page draw at most half its time, so a slow page skips frames instead
of falling behind the kernel.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import anywidget
import plotly
import plotly.graph_objects as go
import traitlets

PLOTLY_BUNDLE = Path(plotly.__file__).parent / "package_data" / "widgetbundle.js"

# One promise per plotly version, shared by every figure of the page and every kernel it talks to,
# and what decides when plotly's code is evaluated: the figures the kernels announced (`expected`,
# one entry per PlotlyCode model) against those set up on this page.
_SLOT_JS = """
const VERSION = %s;
const QUIET_MS = 500;  // every announced figure set up and none new for this long: evaluate
const GIVE_UP_MS = 10000;  // a figure that never sets up holds the others back no longer than this
function plotlyCode() {
  const slots = (globalThis.__workbenchPlotly ??= {});
  if (!slots[VERSION]) {
    let resolve, reject;
    const promise = new Promise((ok, fail) => { resolve = ok; reject = fail; });
    slots[VERSION] = { promise, resolve, reject, started: false, load: null, expected: new Map(),
                       setUp: 0, timer: null };
  }
  return slots[VERSION];
}

// Called on every change of the counts: the wait starts again from here.
function loadWhenQuiet(slot) {
  if (slot.started || !slot.load) return;
  clearTimeout(slot.timer);
  let expected = 0;
  for (const n of slot.expected.values()) expected += n;
  slot.timer = setTimeout(() => {
    slot.started = true;
    slot.load();
  }, slot.setUp >= expected ? QUIET_MS : GIVE_UP_MS);
}
"""

# The shared widget: evaluates plotly's bundle once, when the page's figures are set up.
_CODE_JS = (
    _SLOT_JS
    + """
export default {
  initialize({ model }) {
    const slot = plotlyCode();
    const code = model.get("code");
    slot.load ??= model.get("as_function")
      ? () => {  // in this task, where nothing was waiting for its set-up
        try {
          slot.resolve(new Function(new TextDecoder().decode(code))());
        } catch (error) {
          slot.reject(error);
        }
      }
      : () => {
        const url = URL.createObjectURL(new Blob([code], { type: "text/javascript" }));
        import(url).then(slot.resolve, slot.reject).finally(() => URL.revokeObjectURL(url));
      };
    const kernel = {};  // this model's entry in slot.expected
    const count = () => {
      slot.expected.set(kernel, model.get("figures"));
      loadWhenQuiet(slot);
    };
    model.on("change:figures", count);
    count();
    return () => {
      slot.expected.delete(kernel);
      loadWhenQuiet(slot);
    };
  },
};
"""
)

# A figure: set up at once; recorded messages replayed once plotly's code is here.
_FIGURE_JS = (
    _SLOT_JS
    + """
const DATA = ["_py2js_addTraces", "_py2js_deleteTraces", "_py2js_moveTraces", "_py2js_restyle",
              "_py2js_removeTraceProps"];
const LAYOUT = ["_py2js_relayout", "_py2js_removeLayoutProps"];
const BOTH = ["_py2js_update", "_py2js_animate"];  // style_data and layout_data
const REST_MS = 100;  // after a draw the page's charts rest at least this long, and as long as it took

// Every chart's draws on the page, at most half the page's time: an update that comes while the
// charts rest is drawn when its turn comes, from the model's copy of the whole figure (the latest,
// whatever came between). A page that draws slower than updates come skips frames instead of
// falling minutes behind (and the panel's status and Stop with it).
const pace = (globalThis.__workbenchPace ??= { restUntil: 0, waiting: [], timer: null });

function drawNow(draw) {
  const start = performance.now();
  try {
    draw();
  } finally {
    const end = performance.now();
    pace.restUntil = end + Math.max(REST_MS, end - start);
  }
}

function nextTurn() {
  pace.timer = null;
  const wait = pace.restUntil - performance.now();
  if (wait > 0) { pace.timer = setTimeout(nextTurn, wait); return; }
  const job = pace.waiting.shift();
  if (job) drawNow(job);
  if (pace.waiting.length) pace.timer = setTimeout(nextTurn, pace.restUntil - performance.now());
}

// The model's copy holds numbers as sent (arrays as {dtype, shape, value} with a buffer); plotly
// draws typed arrays. A fresh copy, so that drawing never writes into the model.
const TYPED = { int8: Int8Array, int16: Int16Array, int32: Int32Array, uint8: Uint8Array,
                uint16: Uint16Array, uint32: Uint32Array, float32: Float32Array, float64: Float64Array };
function drawable(x) {
  if (Array.isArray(x)) return x.map(drawable);
  if (ArrayBuffer.isView(x)) return x.slice();
  if (x === "_undefined_") return undefined;
  if (x === null || typeof x !== "object") return x;
  if ("dtype" in x && "shape" in x && ("value" in x || "buffer" in x)) {
    const view = x.value ?? x.buffer;
    return new TYPED[x.dtype](view.buffer.slice(view.byteOffset, view.byteOffset + view.byteLength));
  }
  return Object.fromEntries(Object.entries(x).map(([k, v]) => [k, drawable(v)]));
}

function paced(model, el) {
  let queued = false;
  const catchUp = () => {
    queued = false;
    globalThis.Plotly.react(el, drawable(model.get("_widget_data")),
                            drawable(model.get("_widget_layout")));
  };
  return (callback) => () => {
    if (!globalThis.Plotly?.react) return callback();
    if (queued) return;  // its turn draws the latest
    if (performance.now() >= pace.restUntil && !pace.waiting.length) return drawNow(callback);
    queued = true;
    pace.waiting.push(catchUp);
    pace.timer ??= setTimeout(nextTurn, Math.max(0, pace.restUntil - performance.now()));
  };
}

export default () => {
  let figure, render;  // plotly's widget for this model, once its code is here; a view's set-up
  return {
    initialize({ model }) {
      const slot = plotlyCode();
      slot.setUp += 1;
      loadWhenQuiet(slot);
      let early = [];  // {name, value, data, layout}: what came before plotly's code, in order
      const recorders = [];
      const listen = (event, callback) => { model.on(event, callback); recorders.push([event, callback]); };
      for (const name of [...DATA, ...LAYOUT, ...BOTH]) {
        listen(`change:${name}`, () => {
          const value = model.get(name);
          if (value !== null) early.push({ name, value, data: !LAYOUT.includes(name),
                                          layout: !DATA.includes(name) });
        });
      }
      const superseded = (part) => () => {  // a newer copy of the whole data or layout holds them
        for (const m of early) m[part] = false;
        early = early.filter((m) => m.data || m.layout);
      };
      listen("change:_widget_data", superseded("data"));
      listen("change:_widget_layout", superseded("layout"));

      const handlers = new Map();  // event -> plotly's model callbacks, to replay to
      const override = new Map();
      let replayed = false;
      const proxy = {
        get: (name) => (override.has(name) ? override.get(name) : model.get(name)),
        set: (...args) => model.set(...args),
        on: (event, callback) => {
          if (!replayed) handlers.set(event, [...(handlers.get(event) ?? []), callback]);
          else if (drawing && event.startsWith("change:_py2js_")) callback = drawing(callback);
          model.on(event, callback);
        },
        off: (...args) => model.off(...args),
        save_changes: () => model.save_changes(),
        send: (...args) => model.send(...args),
      };
      let drawing = null;  // while a view sets up: how its draws are paced
      render = async (el) => {
        el.textContent = "drawing the chart…";
        const widget = await figure.catch((error) => {
          el.textContent = `the chart cannot be drawn: ${error}`;
          throw error;
        });
        el.textContent = "";
        drawing = paced(proxy, el);
        try {
          return widget.render({ model: proxy, el });  // the view subscribes in here
        } finally {
          drawing = null;
        }
      };
      figure = slot.promise.then((mod) => {
        for (const [event, callback] of recorders) model.off(event, callback);
        const widget = mod.default();
        widget.initialize({ model: proxy });
        for (const m of early) {
          const value = { ...m.value };
          if (BOTH.includes(m.name) && !m.data) value.style_data = {};
          if (BOTH.includes(m.name) && !m.layout) value.layout_data = {};
          override.set(m.name, value);
          for (const callback of handlers.get(`change:${m.name}`) ?? []) callback();
          override.delete(m.name);
        }
        replayed = true;
        return widget;
      });
    },
    render: ({ el }) => render(el),
  };
};
"""
)


# The bundle is an ES module whose last statement exports plotly's widget; licence comments follow.
_LAST_EXPORT = re.compile(r"export\s*\{([^{}]*)\}\s*;?\s*(?:/\*.*?\*/\s*)*\Z", re.S)


def bundle_as_function(module: str) -> str | None:
    """The bundle as the body of a function that returns what the module exports (evaluated at
    once where it is called), or None where its exports are not one last `export {...}`: then
    the page imports it as a module."""
    last = _LAST_EXPORT.search(module)
    if last is None:
        return None
    names = []
    for item in last.group(1).split(","):
        local, _, exported = (part.strip() for part in item.partition(" as "))
        names.append(f"{json.dumps(exported or local)}: {local}")
    return f'"use strict";\n{module[: last.start()]}\nreturn {{{", ".join(names)}}};\n'


class PlotlyCode(anywidget.AnyWidget):
    """plotly's widget bundle, sent to the page once for every LiveFigure of this kernel, and how
    many of them are open: the page evaluates the bundle once those have set up."""

    _esm = _CODE_JS % json.dumps(plotly.__version__)
    code = traitlets.Bytes().tag(sync=True)
    as_function = traitlets.Bool(False).tag(sync=True)  # code is a function's body, else a module
    figures = traitlets.Int(0).tag(sync=True)

    @classmethod
    def of_bundle(cls, figures: int) -> PlotlyCode:
        module = PLOTLY_BUNDLE.read_text(encoding="utf-8")
        body = bundle_as_function(module)
        return cls(code=(body or module).encode(), as_function=body is not None, figures=figures)


_shared: PlotlyCode | None = None


def announce_figure() -> PlotlyCode:
    """The kernel's one PlotlyCode widget (again after Widget.close_all()), told of one more
    figure before that figure's model reaches the page."""
    global _shared
    if _shared is None or _shared.comm is None:
        _shared = PlotlyCode.of_bundle(figures=1)
    else:
        _shared.figures += 1
    return _shared


class LiveFigure(go.FigureWidget):
    _esm = _FIGURE_JS % json.dumps(plotly.__version__)

    def __init__(self, *args, **kwargs):
        announce_figure()
        super().__init__(*args, **kwargs)

    def close(self):
        if self.comm is not None and _shared is not None and _shared.comm is not None:
            _shared.figures = max(0, _shared.figures - 1)  # a reloaded page will not wait for it
        super().close()
