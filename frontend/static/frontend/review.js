// The review queue's keys: each element with data-key="x" is clicked by the key x (a verdict
// button saves the label; next / previous follow their link); data-key-focus="x" puts the
// cursor in that field. Keys typed in a field are the field's, but Escape, which leaves it.
"use strict";

document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const target = event.target;
  const typing = target instanceof HTMLElement && target.matches("input, textarea, select");
  if (typing) {
    if (event.key === "Escape") target.blur();
    return;
  }
  const key = event.key === "ArrowRight" ? "j" : event.key === "ArrowLeft" ? "k" : event.key;
  const field = document.querySelector(`[data-key-focus="${CSS.escape(key)}"]`);
  if (field) {
    event.preventDefault();
    field.focus();
    return;
  }
  const action = document.querySelector(`[data-key="${CSS.escape(key)}"]`);
  if (action) {
    event.preventDefault();
    action.click();
  }
});
// The keys answer from here on (see app.js): tests wait for this mark before they press.
document.documentElement.dataset.keys = "ready";
