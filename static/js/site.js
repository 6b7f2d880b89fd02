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

  // The request form: a stack pre-filled from the person's last lease (data-default-stack)
  // is cleared when a card model of another stack is chosen (its option's data-stack), and
  // comes back when a model of that stack is chosen again; the preview then asks again.
  document.addEventListener("change", function (event) {
    var select = event.target;
    if (!select.matches || !select.matches("#request-form select[name=card_model]")) {
      return;
    }
    var form = select.form;
    var stack = form.querySelector("select[name=stack]");
    var note = form.querySelector("[data-default-stack]");
    var option = select.options[select.selectedIndex];
    if (!stack || !note || !option) {
      return;
    }
    var wanted = note.dataset.defaultStack;
    var fits = !option.dataset.stack || option.dataset.stack === wanted;
    var next = stack.value;
    if (!fits && stack.value === wanted) {
      next = "";
    } else if (fits && stack.value === "" && stack.dataset.cleared === "yes") {
      next = wanted;
    }
    if (next !== stack.value) {
      stack.dataset.cleared = next === "" ? "yes" : "";
      stack.value = next;
      stack.dispatchEvent(new Event("change", { bubbles: true }));
    }
  });

  // <form data-confirm="Release the 6 cards now?" data-confirm-ok="Release">: a destructive
  // action asks first, in the page's own dialog (#confirm-dialog in base.html); the form is
  // sent only when the person confirms. The button that was pressed is sent along.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var dialog = document.getElementById("confirm-dialog");
    if (!form.dataset || !form.dataset.confirm || form.dataset.confirmed || !dialog || !dialog.showModal) {
      return;
    }
    event.preventDefault();
    var submitter = event.submitter || null;
    var ok = dialog.querySelector("[data-confirm-ok]");
    dialog.querySelector("#confirm-dialog-text").textContent = form.dataset.confirm;
    if (form.dataset.confirmOk) {
      ok.textContent = form.dataset.confirmOk;
    }
    dialog.returnValue = "";
    dialog.onclose = function () {
      if (dialog.returnValue === "confirm") {
        form.dataset.confirmed = "1";
        if (form.requestSubmit) {
          form.requestSubmit(submitter);
        } else {
          form.submit();
        }
      }
    };
    dialog.showModal();
  });

  // <pre data-copy>: a "Copy" button beside commands (the lease's access details), added here so
  // a page without JavaScript shows no dead button; again after htmx swaps the status in.
  // navigator.clipboard needs HTTPS; on a plain-HTTP intranet the text is selected and copied.
  function copyButtons(root) {
    if (!root || !root.querySelectorAll) {
      return;
    }
    var labels = document.body.dataset;
    root.querySelectorAll("pre[data-copy]").forEach(function (pre) {
      if (pre.previousElementSibling && pre.previousElementSibling.matches("button.copy-button")) {
        return;
      }
      var button = document.createElement("button");
      button.type = "button";
      button.className = "button button--secondary button--small copy-button";
      button.textContent = labels.copyLabel || "Copy";
      button.addEventListener("click", function () {
        var done = function () {
          button.textContent = labels.copiedLabel || "Copied";
          window.setTimeout(function () {
            button.textContent = labels.copyLabel || "Copy";
          }, 2000);
        };
        var text = pre.textContent;
        if (navigator.clipboard && window.isSecureContext) {
          navigator.clipboard.writeText(text).then(done);
          return;
        }
        var range = document.createRange();
        range.selectNodeContents(pre);
        var selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        if (document.execCommand("copy")) {
          done();
        }
      });
      pre.parentNode.insertBefore(button, pre);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    copyButtons(document);
  });
  document.addEventListener("htmx:load", function (event) {
    copyButtons(event.target);
  });

  // <a data-print>: print the page.
  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest("[data-print]");
    if (link) {
      event.preventDefault();
      window.print();
    }
  });
})();
