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

// A Resend confirmation (details.resend) opens beside its button; moved sideways, when it would
// cross an edge of the window, so that all of it can be read and its button pressed.
const WINDOW_MARGIN = 8;
function keepInsideWindow(details) {
  const form = details.querySelector(":scope > form");
  if (!form || !details.open) return;
  form.style.left = "";
  form.style.right = "";
  const box = form.getBoundingClientRect();
  const width = document.documentElement.clientWidth;
  let shift = 0;
  if (box.right > width - WINDOW_MARGIN) shift = width - WINDOW_MARGIN - box.right;
  if (box.left + shift < WINDOW_MARGIN) shift = WINDOW_MARGIN - box.left;
  if (shift) {
    form.style.left = `${form.offsetLeft + shift}px`;
    form.style.right = "auto";
  }
}
document.addEventListener("toggle", (event) => {
  if (event.target.matches && event.target.matches("details.resend")) keepInsideWindow(event.target);
}, true);
window.addEventListener("resize", () => document.querySelectorAll("details.resend[open]").forEach(keepInsideWindow));

// A timeline drawing wider than its box scrolls sideways: the note under it says how many of the
// message's steps are out of sight to the right, until they are scrolled into view.
function announceLaterSteps(box) {
  const note = box.nextElementSibling;
  if (!note || !note.matches(".timeline-more")) return;
  const right = box.getBoundingClientRect().right;
  const later = [...box.querySelectorAll("circle.hop")].filter((hop) => {
    const rect = hop.getBoundingClientRect();
    return (rect.left + rect.right) / 2 > right;
  }).length;
  note.hidden = later === 0;
  note.textContent = later === 0 ? "" : `${later} later step${later === 1 ? "" : "s"} out of sight →: `
    + "scroll the drawing sideways, or read them in the table of hops below.";
}
function announceAllLaterSteps() { document.querySelectorAll(".timeline-scroll").forEach(announceLaterSteps); }
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll(".timeline-scroll").forEach((box) => {
    box.addEventListener("scroll", () => announceLaterSteps(box), {passive: true});
  });
  announceAllLaterSteps();
});
window.addEventListener("resize", announceAllLaterSteps);
