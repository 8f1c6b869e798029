'use strict'
// run.js is the node-postgres runner of the integration package's
// differential harness (differential_driver_test.go). It reads commands, one
// JSON array a line, from stdin and answers each with one JSON line:
//
//   ["open", url, mode]  connects; mode is simple, extended, named or cursor
//   ["stmt", sql]        runs sql and prints what node-postgres returned
//   ["close"]            ends the connection
//
// Modes: simple is client.query(text), the simple protocol; extended is
// {text, queryMode: 'extended'}, an unnamed statement; named is
// {name: 's<n>', text}, a named prepared statement (node-postgres prepares it
// once per connection and name); cursor is pg-cursor reading one row per
// Execute, a named portal with a row limit, as long as rows come.
//
// A result has the command tag (result.command, with result.oid for INSERT
// and result.rowCount, as PostgreSQL sends them), the fields (name, type OID,
// typmod and format of every RowDescription field: node-postgres exposes
// them all), the rows as the server sent them (every type parser returns the
// text unchanged), the error's fields and the transaction status
// (client.getTransactionStatus(), from the last ReadyForQuery; a cursor
// shows its own state only after its Sync, at close).
const readline = require('readline')
const { Client } = require('pg')
const Cursor = require('pg-cursor')

// raw keeps every value as the server sent it.
const raw = { getTypeParser: () => (v) => v }

let client = null
let mode = ''
let named = 0

function cell(v) {
  if (v === null || v === undefined) return 'NULL'
  if (Buffer.isBuffer(v)) return '\\x' + v.toString('hex')
  return JSON.stringify(v)
}

function addResult(out, res, withRows) {
  if (!res) return
  let tag = res.command || ''
  if (tag === 'INSERT') tag += ' ' + (res.oid || 0)
  if (res.rowCount !== null && res.rowCount !== undefined) tag += ' ' + res.rowCount
  out.tags.push(tag)
  for (const f of res.fields || []) {
    out.fields.push(`${f.name}:${f.dataTypeID}:${f.dataTypeModifier}:${f.format}`)
  }
  if (withRows) {
    for (const r of res.rows || []) out.rows.push(r.map(cell).join('|'))
  }
}

function errFields(e) {
  if (e && e.severity) {
    return { severity: e.severity || '', code: e.code || '', message: e.message || '',
      detail: e.detail || '', hint: e.hint || '' }
  }
  return { other: String(e && e.message ? e.message : e) }
}

function readCursor(cur, out) {
  return new Promise((resolve, reject) => {
    const step = () => {
      cur.read(1, (err, rows, res) => {
        if (err) return reject(err)
        if (rows.length === 0) {
          addResult(out, res, false)
          return resolve()
        }
        for (const r of rows) out.rows.push(r.map(cell).join('|'))
        step()
      })
    }
    step()
  })
}

async function runCursor(sql, out) {
  const cur = client.query(new Cursor(sql, null, { rowMode: 'array', types: raw }))
  try {
    await readCursor(cur, out)
  } finally {
    // After an error the cursor has sent its Sync already; close would
    // wait for a ReadyForQuery that may have come and gone.
    if (cur.state !== 'done' && cur.state !== 'error') {
      await new Promise((resolve) => cur.close(() => resolve()))
    }
  }
}

// idle waits until the client has read the statement's ReadyForQuery: a
// failed query settles at the ErrorResponse, before it.
async function idle() {
  const deadline = Date.now() + 5000
  while (client && client._queryable && !(client.readyForQuery && !client._activeQuery) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 0))
  }
}

async function stmt(sql) {
  const out = { tags: [], fields: [], rows: [] }
  let err = null
  try {
    if (mode === 'cursor') {
      await runCursor(sql, out)
    } else {
      const q = { text: sql, rowMode: 'array', types: raw }
      if (mode === 'extended') q.queryMode = 'extended'
      if (mode === 'named') q.name = 's' + ++named
      const res = await client.query(q)
      for (const r of Array.isArray(res) ? res : [res]) addResult(out, r, true)
    }
  } catch (e) {
    err = errFields(e)
  }
  await idle()
  return { tag: out.tags.join('; '), fields: out.fields, rows: out.rows, err,
    tx: client.getTransactionStatus() || '' }
}

async function command(cmd) {
  switch (cmd[0]) {
    case 'open':
      mode = cmd[2]
      named = 0
      client = new Client({ connectionString: cmd[1] })
      // A connection the server ends is reported by the next statement.
      client.on('error', () => {})
      await client.connect()
      return { ok: true }
    case 'stmt':
      return stmt(cmd[1])
    case 'close':
      if (client) await client.end().catch(() => {})
      client = null
      return { ok: true }
    default:
      throw new Error('unknown command ' + cmd[0])
  }
}

async function main() {
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity })
  for await (const line of rl) {
    let res
    try {
      res = await command(JSON.parse(line))
    } catch (e) {
      res = { err: errFields(e) }
    }
    process.stdout.write(JSON.stringify(res) + '\n')
  }
  if (client) await client.end().catch(() => {})
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e) + '\n')
  process.exit(1)
})
