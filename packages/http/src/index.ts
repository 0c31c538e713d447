/**
 * Leasehold over HTTP: signed callback URLs, Standard Webhooks ingress, the admin API and the
 * console.
 *
 * @since 0.1.0
 */
export * as Admin from "./Admin.js"
export * as Callback from "./Callback.js"
export * as CallbackRoutes from "./CallbackRoutes.js"
export * as Callbacks from "./Callbacks.js"
export * as Console from "./Console.js"
export * as Credentials from "./Credentials.js"
export * as DeferredCallbacks from "./DeferredCallbacks.js"
export * as Handlers from "./Handlers.js"
export * as Server from "./Server.js"
