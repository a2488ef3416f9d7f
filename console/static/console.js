// The console works without this script; it adds "select all" and a
// confirmation before the bulk actions.
document.addEventListener("change", (e) => {
  if (!e.target.matches("input.select-all")) return;
  const form = e.target.closest("form");
  form.querySelectorAll('input[type=checkbox][name=id]').forEach((box) => { box.checked = e.target.checked; });
});
document.addEventListener("click", (e) => {
  const b = e.target.closest("button.confirm");
  if (b && !window.confirm(b.dataset.confirm)) e.preventDefault();
});
