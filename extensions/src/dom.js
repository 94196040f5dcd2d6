// Small DOM helper shared by the Inspector and the GPT-2 runner widgets.

/** h(tag, attrs, ...children): create an element; `class`, `text` and `on<event>` attrs are special. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) el.append(c);
  return el;
}

/** Sorted line numbers as compact ranges: [670, 671, 672, 1201, 2820, 2821] -> "670–672, 1201, 2820–2821". */
export function compactRanges(nums) {
  const xs = [...new Set(nums)].sort((a, b) => a - b);
  const out = [];
  for (let i = 0; i < xs.length; ) {
    let j = i;
    while (j + 1 < xs.length && xs[j + 1] === xs[j] + 1) j++;
    out.push(j > i ? `${xs[i]}–${xs[j]}` : String(xs[i]));
    i = j + 1;
  }
  return out.join(", ");
}
