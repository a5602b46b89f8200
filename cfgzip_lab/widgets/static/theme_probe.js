// cfgzip_lab's ThemeProbe (an anywidget): reports JupyterLab's theme to Python, so the plotly
// charts (drawn from Python-side templates) follow it like the CSS does. Hand-written ES module
// with no imports and no build step; cfgzip_lab.widgets.theme.ThemeProbe is its Python side.
//
// It reads the --jp-* variables named in the model's `names` from the page's computed style and
// sets `theme` = {light: bool, name: string, vars: {name: value}} now, and again whenever
// JupyterLab switches theme (it sets data-jp-theme-light / data-jp-theme-name on <body>). The
// new theme's stylesheet arrives a moment after the attribute, so it reads again until two reads
// agree (at most 3 s).

function read(names) {
  const style = getComputedStyle(document.body);
  const vars = {};
  for (const name of names) vars[name] = style.getPropertyValue(`--jp-${name}`).trim();
  return {
    light: document.body.dataset.jpThemeLight !== "false",
    name: document.body.dataset.jpThemeName || "",
    vars,
  };
}

function render({ model, el }) {
  el.style.display = "none";
  let last = "";
  let timer = null;
  const report = () => {
    const theme = read(model.get("names") || []);
    const key = JSON.stringify(theme);
    if (key !== last) {
      last = key;
      model.set("theme", theme);
      model.save_changes();
    }
    return key;
  };
  const settle = () => {
    clearTimeout(timer);
    let previous = report();
    let tries = 0;
    const again = () => {
      const now = report();
      tries += 1;
      if ((now !== previous || tries < 3) && tries < 15) {
        previous = now;
        timer = setTimeout(again, 200);
      }
    };
    timer = setTimeout(again, 100);
  };
  const observer = new MutationObserver(settle);
  observer.observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-light", "data-jp-theme-name"] });
  settle();
  return () => {
    observer.disconnect();
    clearTimeout(timer);
  };
}

export default { render };
