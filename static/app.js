// Copy buttons: <button class="copy" data-copy="text">. Everything else works without script.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button.copy[data-copy]");
  if (!button) return;
  const label = button.textContent;
  try {
    await navigator.clipboard.writeText(button.dataset.copy);
  } catch (err) {
    const field = document.createElement("textarea");
    field.value = button.dataset.copy;
    document.body.appendChild(field);
    field.select();
    document.execCommand("copy");
    field.remove();
  }
  button.textContent = "Copied";
  setTimeout(() => { button.textContent = label; }, 1500);
});

// A request that answered with an error puts it into the banner; the next good one clears it.
document.addEventListener("htmx:afterRequest", (event) => {
  const banner = document.getElementById("error-banner");
  if (banner && event.detail.successful) banner.textContent = "";
});
