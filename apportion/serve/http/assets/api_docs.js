// The /docs page: Swagger UI over this server's /openapi.json (a file, so that the page's
// Content-Security-Policy can forbid inline scripts).
"use strict";
window.addEventListener("load", () => {
  window.ui = SwaggerUIBundle({
    url: "openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null, // never send the document elsewhere to be checked
    persistAuthorization: false,
  });
});
