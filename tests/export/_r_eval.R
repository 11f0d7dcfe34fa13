# An exported nlmixr2 model (model.R) evaluated in plain R, without nlmixr2 or rxode2:
# PRED and IPRED of every observation record of a data file.
#
# Rscript _r_eval.R MODEL.R DATA.csv ETAS.csv OUT.csv
#
# - MODEL.R is sourced (in its folder) and the body of its model function is read as R
#   expressions: ini({...}) gives the parameter values (`x <- v`, `x <- c(lower, v)`,
#   `x <- fix(v)`) and the names of the random effects (`eta ~ v`, `a + b ~ c(...)`), in order;
#   model({...}) is rewritten statement by statement: `d/dt(X) <- e` becomes `.ddt_X <- e`
#   (X a state, numbered in the order of its d/dt line, as nlmixr2 numbers CMT), `X(0) <- e`
#   `.init_X <- e`, `f(X)`/`alag(X)`/`rate(X)`/`dur(X) <- e` `.f_X`..., and the residual line
#   `y ~ add(...)` names the observed variable y. Every other statement (assignments, the
#   `if (...) {...}` lines of a branch) is kept as written and evaluated by R.
# - ETAS.csv holds one row per subject: ID, then the random effects in the order of ini().
# - Each subject is integrated from record to record by an adaptive Dormand-Prince 5(4)
#   written below (rtol 1e-11, atol 1e-13; deSolve is not needed), the whole model block
#   evaluated at every right-hand side: bolus doses f(X)*AMT into CMT after alag(X),
#   infusions at RATE (duration f*AMT/RATE), RATE=-1 at rate(X), RATE=-2 over dur(X),
#   EVID 3 resets the amounts, EVID 4 resets and doses. Steady state (SS) and linCmt() are
#   not evaluated here (the script stops, naming them).
# - PRED has every random effect 0, IPRED the subject's row of ETAS.csv.

args <- commandArgs(trailingOnly = TRUE)
model_file <- normalizePath(args[1])
data <- read.csv(args[2], na.strings = ".")
etas <- read.csv(args[3], check.names = FALSE)
out_file <- args[4]
RTOL <- 1e-11
ATOL <- 1e-13

local({
  old <- setwd(dirname(model_file))
  on.exit(setwd(old))
  exprs <- parse(model_file)
  for (x in exprs) {
    if (is.call(x) && identical(x[[1]], as.name("<-")) && identical(x[[2]], as.name("model_fit"))) {
      assign("model_fit", eval(x), envir = globalenv())
    }
  }
})

blocks <- as.list(body(model_fit))[-1]
block_of <- function(name) {
  for (b in blocks) if (is.call(b) && identical(b[[1]], as.name(name))) return(as.list(b[[2]])[-1])
  stop("model.R: no ", name, "({...}) block")
}

# ini: parameter values and random-effect names
params <- list()
eta_names <- character()
helpers <- new.env()
helpers$fix <- function(...) c(...)
for (x in block_of("ini")) {
  if (!is.call(x)) next
  op <- as.character(x[[1]])
  if (op %in% c("<-", "=")) {
    v <- eval(x[[3]], helpers)
    params[[as.character(x[[2]])]] <- if (length(v) == 1) v else v[2]
  } else if (op == "~") {
    eta_names <- c(eta_names, all.vars(x[[2]]))
  }
}

# model: statements rewritten, states in the order of their d/dt lines
states <- character()
observed <- NULL
stmts <- list()
for (x in block_of("model")) {
  if (is.call(x) && identical(x[[1]], as.name("~"))) {
    observed <- as.character(x[[2]])
    next
  }
  if (is.call(x) && as.character(x[[1]]) %in% c("<-", "=")) {
    lhs <- x[[2]]
    if (is.call(x[[3]]) && identical(x[[3]][[1]], as.name("linCmt"))) {
      stop("linCmt() (a closed form) is not evaluated by this script")
    }
    if (is.call(lhs) && identical(lhs[[1]], as.name("/")) && identical(lhs[[2]], as.name("d"))) {
      st <- as.character(lhs[[3]][[2]])
      states <- c(states, st)
      x[[2]] <- as.name(paste0(".ddt_", st))
    } else if (is.call(lhs) && length(lhs) == 2 && identical(lhs[[2]], 0)) {
      x[[2]] <- as.name(paste0(".init_", as.character(lhs[[1]])))
    } else if (is.call(lhs) && as.character(lhs[[1]]) %in% c("f", "alag", "rate", "dur")) {
      x[[2]] <- as.name(paste0(".", as.character(lhs[[1]]), "_", as.character(lhs[[2]])))
    }
  }
  stmts[[length(stmts) + 1]] <- x
}
if (is.null(observed)) stop("model.R: no residual line (y ~ add(...))")
program <- as.call(c(as.name("{"), stmts))
n <- length(states)
items <- c("ID", "TIME", "DV", "AMT", "EVID", "MDV", "CMT", "RATE", "II", "ADDL", "SS", "DVID", "CENS")
covariates <- setdiff(names(data), items)

evaluate <- function(base, x, t) {
  e <- list2env(base, parent = baseenv())
  for (k in seq_len(n)) assign(states[k], x[k], envir = e)
  assign("t", t, envir = e)
  eval(program, e)
  e
}
get0_or <- function(e, name, default) if (exists(name, envir = e, inherits = FALSE)) get(name, envir = e) else default

rhs <- function(base, t, x, rate) {
  e <- evaluate(base, x, t)
  vapply(states, function(s) get(paste0(".ddt_", s), envir = e), 0.0) + rate
}

# Dormand-Prince 5(4), adaptive
A <- list(
  c(1 / 5),
  c(3 / 40, 9 / 40),
  c(44 / 45, -56 / 15, 32 / 9),
  c(19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
  c(9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
  c(35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84)
)
C <- c(0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1, 1)
B5 <- c(35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0)
B4 <- c(5179 / 57600, 0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)
dp45 <- function(base, x, t0, t1, rate) {
  if (t1 <= t0) return(x)
  t <- t0
  h <- (t1 - t0) / 100
  k1 <- rhs(base, t, x, rate)
  repeat {
    if (t + h >= t1) h <- t1 - t
    k <- matrix(0, n, 7)
    k[, 1] <- k1
    for (s in 2:7) {
      xs <- x + h * as.vector(k[, 1:(s - 1), drop = FALSE] %*% A[[s - 1]])
      k[, s] <- rhs(base, t + C[s] * h, xs, rate)
    }
    x5 <- x + h * as.vector(k %*% B5)
    err <- h * as.vector(k %*% (B5 - B4))
    sc <- ATOL + RTOL * pmax(abs(x), abs(x5))
    en <- sqrt(mean((err / sc)^2))
    if (en <= 1) {
      t <- t + h
      x <- x5
      k1 <- k[, 7]
      if (t >= t1) return(x)
    }
    h <- h * min(5, max(0.2, 0.9 * en^(-1 / 5)))
  }
}

subject <- function(rec, eta) {
  base <- params
  for (k in seq_along(eta_names)) base[[eta_names[k]]] <- eta[k]
  for (c in covariates) base[[c]] <- rec[[c]][1]
  e0 <- evaluate(base, rep(0, n), rec$TIME[1])
  x <- vapply(states, function(s) get0_or(e0, paste0(".init_", s), 0), 0.0)
  t <- rec$TIME[1]
  rate <- rep(0, n)
  pending <- list()  # list(time, kind, cmt, a, b)
  apply_event <- function(ev) {
    if (ev$kind == "bolus") {
      x[ev$cmt] <<- x[ev$cmt] + ev$a
    } else if (ev$kind == "start") {
      rate[ev$cmt] <<- rate[ev$cmt] + ev$a
      pending[[length(pending) + 1]] <<- list(time = t + ev$b, kind = "stop", cmt = ev$cmt, a = ev$a, b = 0)
    } else {
      rate[ev$cmt] <<- rate[ev$cmt] - ev$a
    }
  }
  advance <- function(to) {
    repeat {
      times <- vapply(pending, function(p) p$time, 0.0)
      due <- which(times <= to)
      if (length(due) == 0) break
      i <- due[which.min(times[due])]
      ev <- pending[[i]]
      pending[[i]] <<- NULL
      x <<- dp45(base, x, t, ev$time, rate)
      t <<- ev$time
      apply_event(ev)
    }
    x <<- dp45(base, x, t, to, rate)
    t <<- to
  }
  out <- rep(NA_real_, nrow(rec))
  for (i in seq_len(nrow(rec))) {
    r <- rec[i, ]
    advance(r$TIME)
    evid <- if (is.null(r$EVID) || is.na(r$EVID)) 0 else r$EVID
    if (!is.null(r$SS) && !is.na(r$SS) && r$SS != 0) stop("steady state (SS) is not evaluated by this script")
    if (evid %in% c(3, 4)) {
      x[] <- 0
      rate[] <- 0
      pending <- list()
    }
    if (evid %in% c(1, 4)) {
      e <- evaluate(base, x, r$TIME)
      st <- states[r$CMT]
      f <- get0_or(e, paste0(".f_", st), 1)
      lag <- get0_or(e, paste0(".alag_", st), 0)
      amt <- f * r$AMT
      rt <- if (is.null(r$RATE) || is.na(r$RATE)) 0 else r$RATE
      ev <- if (rt == 0) {
        list(time = r$TIME + lag, kind = "bolus", cmt = r$CMT, a = amt, b = 0)
      } else if (rt == -1) {
        rr <- get(paste0(".rate_", st), envir = e)
        list(time = r$TIME + lag, kind = "start", cmt = r$CMT, a = rr, b = amt / rr)
      } else if (rt == -2) {
        d <- get(paste0(".dur_", st), envir = e)
        list(time = r$TIME + lag, kind = "start", cmt = r$CMT, a = amt / d, b = d)
      } else {
        list(time = r$TIME + lag, kind = "start", cmt = r$CMT, a = rt, b = amt / rt)
      }
      pending[[length(pending) + 1]] <- ev
      advance(r$TIME)
    }
    if (evid == 0 && (is.null(r$MDV) || is.na(r$MDV) || r$MDV == 0)) {
      out[i] <- get(observed, envir = evaluate(base, x, r$TIME))
    }
  }
  out
}

rows <- list()
for (id in unique(data$ID)) {
  rec <- data[data$ID == id, , drop = FALSE]
  pred <- subject(rec, rep(0, length(eta_names)))
  row <- etas[as.character(etas$ID) == as.character(id), , drop = FALSE]
  ipred <- if (nrow(row) == 1) subject(rec, as.numeric(row[1, -1])) else rep(NA_real_, nrow(rec))
  keep <- !is.na(pred)
  rows[[length(rows) + 1]] <- data.frame(
    ID = rec$ID[keep], TIME = sprintf("%.17g", rec$TIME[keep]),
    PRED = sprintf("%.17g", pred[keep]), IPRED = sprintf("%.17g", ipred[keep])
  )
}
write.csv(do.call(rbind, rows), out_file, row.names = FALSE, quote = FALSE)
