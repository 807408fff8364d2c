// Paging of an experiment's trials (issue 18): the experiment page renders
// one page of its trials table and draws the learning curves of that page's
// trials only (their metrics downsampled by the master), so that an
// experiment with thousands of trials stays interactive.
import {h, setText} from './dom.js';

export const kTrialPageSize = 50;

export class TrialPager {
  // onChange() is called after the page changed.
  constructor(onChange, pageSize = kTrialPageSize) {
    this.onChange = onChange;
    this.pageSize = pageSize;
    this.page = 0;
    this.pages = 1;
    this.first = h('button', {type: 'button', 'data-testid': 'trials-first', text: '«', title: 'First page',
      onclick: () => this.go(0)});
    this.prev = h('button', {type: 'button', 'data-testid': 'trials-prev', text: 'Previous',
      onclick: () => this.go(this.page - 1)});
    this.label = h('span', {class: 'pager-label', 'data-testid': 'trials-page'});
    this.next = h('button', {type: 'button', 'data-testid': 'trials-next', text: 'Next',
      onclick: () => this.go(this.page + 1)});
    this.last = h('button', {type: 'button', 'data-testid': 'trials-last', text: '»', title: 'Last page',
      onclick: () => this.go(this.pages - 1)});
    this.el = h('div', {class: 'controls pager', 'data-testid': 'trials-pager'},
      this.first, this.prev, this.label, this.next, this.last);
  }

  // The items of the current page of `list` (the page is clamped when the
  // list shrank); updates the label and buttons.
  slice(list) {
    const total = list.length;
    this.pages = Math.max(1, Math.ceil(total / this.pageSize));
    this.page = Math.min(Math.max(0, this.page), this.pages - 1);
    const start = this.page * this.pageSize;
    const end = Math.min(total, start + this.pageSize);
    setText(this.label, total ? `Trials ${start + 1}–${end} of ${total} (page ${this.page + 1} of ${this.pages})` :
      'No trials');
    this.first.disabled = this.prev.disabled = this.page === 0;
    this.next.disabled = this.last.disabled = this.page >= this.pages - 1;
    this.el.hidden = total <= this.pageSize;
    return list.slice(start, end);
  }

  go(page) {
    const p = Math.min(Math.max(0, page), this.pages - 1);
    if (p === this.page) return;
    this.page = p;
    this.onChange();
  }
}
