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

// A page that refreshes itself (hx-trigger "every"): when the server stops answering, say since
// when the figures on it are stale; the next answer clears the notice.
document.addEventListener("htmx:sendError", (event) => {
  const banner = document.getElementById("error-banner");
  if (!banner || banner.dataset.staleSince) return;
  const since = new Date().toISOString().replace("T", " ").slice(0, 19) + " UTC";
  banner.dataset.staleSince = since;
  banner.textContent = `The server has not answered since ${since}: the figures below are stale.`;
  banner.classList.add("stale");
});
document.addEventListener("htmx:afterRequest", (event) => {
  const banner = document.getElementById("error-banner");
  if (banner && event.detail.successful && banner.dataset.staleSince) {
    delete banner.dataset.staleSince;
    banner.classList.remove("stale");
  }
});
