/* Small behaviours of the portal's pages, kept in a file: the Content-Security-Policy allows
   no inline scripts or event handlers (onclick, onchange). */
(function () {
  "use strict";

  // <form data-goto-prefix="/leases/calendar/">: choosing in its <select> opens PREFIX + value + "/".
  document.addEventListener("change", function (event) {
    var form = event.target.closest && event.target.closest("form[data-goto-prefix]");
    if (form && event.target.value) {
      window.location = form.dataset.gotoPrefix + encodeURIComponent(event.target.value) + "/";
    }
  });

  // <a data-print>: print the page.
  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest("[data-print]");
    if (link) {
      event.preventDefault();
      window.print();
    }
  });

  // <button data-copy="#id">: copy that element's text (the ssh command on the lease page).
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-copy]");
    if (!button) return;
    var source = document.querySelector(button.dataset.copy);
    if (!source || !navigator.clipboard) return;
    navigator.clipboard.writeText(source.textContent.trim()).then(function () {
      button.dataset.copied = "true";
      button.textContent = button.dataset.copiedLabel || button.textContent;
    });
  });
})();
